"""A UI that explains (issue 16): the source table and the model have distinct names, assets say what they
are, metadata is typed (exact HW, paths, row count, column schema) and runs are named after their model."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from incsync.cli.main import main
from incsync.core.transfer_id import TRANSFER_ID_PATTERN
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.browser import dump_dom, page_text, webserver
from incsync_tests.support.lake import lake_config, order, ts, write_table


def test_assets_and_jobs_say_what_they_are(tmp_path: Path) -> None:
    defs = build_definitions(lake_config(tmp_path, model={"source_table": "public.orders"}))
    assert sorted(k.to_user_string() for k in defs.resolve_all_asset_keys()) == [
        "lake/orders", "lake/tables/lake.public.orders",  # the lineage graph labels nodes by the last part
    ]
    source = next(iter(defs.resolve_assets_def(dg.AssetKey(["lake", "tables", "lake.public.orders"])).specs))
    assert source.description == "Table `public.orders` of source `lake` (lake), read by model orders."
    assert source.tags == {"dagster/kind/lake": ""}
    model = next(iter(defs.resolve_assets_def(dg.AssetKey(["lake", "orders"])).specs))  # the model's key is unchanged
    assert model.description == (
        "Each recipient's copy of table `public.orders` from source `lake`, split by tenant column `organization_id`. "
        "Primary key: id; changes tracked by `updated_at` (lookback 300 s); daily windows; schedule `*/15 * * * *` (UTC). "
        "Freshness: warns 22.5 min and fails 30 min after the last transfer landed (its slowest schedule `*/15 * * * *` "
        "ticks at least every 15 min)."
    )
    assert model.freshness_policy == dg.FreshnessPolicy.time_window(fail_window=timedelta(minutes=30),
                                                                    warn_window=timedelta(minutes=22.5))
    assert model.tags == {"dagster/kind/spark": "", "dagster/kind/delta": ""}
    assert model.metadata["last_modified_column"] == "updated_at"
    assert "orders" in {job.name for job in defs.resolve_all_job_defs()}
    schedules = {s.name: s.job_name for s in defs.schedules}
    assert schedules == {"incsync_orders_schedule": "orders", "incsync_maintenance_schedule": "incsync_maintenance"}
    # scheduled runs are named after the model too


def test_a_composite_primary_key_reads_as_its_column_names(tmp_path: Path) -> None:
    defs = build_definitions(lake_config(tmp_path, model={"primary_key": ["id", "organization_id"]}))
    [model] = defs.resolve_assets_def(dg.AssetKey(["lake", "orders"])).specs
    assert model.description == (
        "Each recipient's copy of table `orders` from source `lake`, split by tenant column `organization_id`. "
        "Primary key: id, organization_id; changes tracked by `updated_at` (lookback 300 s); daily windows; "
        "schedule `*/15 * * * *` (UTC). "
        "Freshness: warns 22.5 min and fails 30 min after the last transfer landed (its slowest schedule `*/15 * * * *` "
        "ticks at least every 15 min)."
    )
    assert model.metadata["primary_key"] == "id, organization_id"


def test_a_transfer_records_typed_metadata_in_a_run_named_after_the_model(tmp_path: Path, monkeypatch, spark) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1, 2, 3, 456789)), order(2, "org_1", ts(1, 5))])
    file = lake_config(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert main(["transfer", "orders", "--window", "2024-01-01", "-c", str(file)]) == 0
    instance = dg.DagsterInstance.get()
    [run] = instance.get_runs()
    assert run.job_name == "orders"
    event = instance.get_latest_materialization_event(dg.AssetKey(["lake", "orders"]))
    metadata = event.asset_materialization.metadata
    assert metadata["high_watermark_exact"] == dg.MetadataValue.text("2024-01-01T05:00:00+00:00")
    assert metadata["dagster/row_count"] == dg.MetadataValue.int(2)
    assert metadata["destination_path"] == dg.MetadataValue.path(str(tmp_path / "out" / "acme" / "orders"))
    assert isinstance(metadata["high_watermark"], dg.TimestampMetadataValue)
    schema = metadata["dagster/column_schema"].value
    assert [c.name for c in schema.columns] == ["id", "organization_id", "status", "amount", "updated_at"]
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1, 2, 3, 456789)), order(3, "org_1", ts(1, 9, 0, 0, 1))])
    assert main(["transfer", "orders", "--window", "2024-01-01", "-c", str(file)]) == 0
    event = instance.get_latest_materialization_event(dg.AssetKey(["lake", "orders"]))
    assert event.asset_materialization.metadata["high_watermark_exact"].value == "2024-01-01T09:00:00.000001+00:00"


@pytest.mark.slow  # ~21 s (a webserver and Chromium): make test-long; the metadata it shows is asserted above
def test_the_asset_page_in_a_browser_shows_the_lineage_names_and_a_partitions_metadata(tmp_path: Path, monkeypatch, spark) -> None:
    """Headless Chromium over `dagster-webserver` on an instance with one transfer done: the lineage graph
    labels the source table and the model differently, and the partition's page shows its exact metadata
    and the job named after the model."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1, 2, 3, 456789)), order(2, "org_1", ts(1, 5, 0, 0, 1))])
    file = lake_config(tmp_path)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main(["transfer", "orders", "--window", "2024-01-01", "-c", str(file)]) == 0
    env = {"DAGSTER_HOME": str(home), "INCSYNC_CONFIG": str(file), "INCSYNC_AUTOMATION": "stopped",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    with webserver(tmp_path, env) as url:
        lineage = dump_dom(f"{url}/assets/lake/orders?view=lineage", tmp_path / "chromium")
        partition = dump_dom(f"{url}/assets/lake/orders?view=partitions&partition=acme%7C2024-01-01", tmp_path / "chromium")

    nodes = re.findall(r'class="AssetNode_assetName[^"]*"[^>]*>([^<]*)<', lineage)
    assert sorted(nodes) == ["lake.orders", "orders"], page_text(lineage)[:3000]
    shown = page_text(partition)[:3000]
    # The partition's heading and its status tag; the run's job: the model's, not __ASSET_JOB.
    assert re.findall(r'title="(acme\|2024-01-01)">.*?<span data-tooltip="([^"]+)"', partition, flags=re.S) == [
        ("acme|2024-01-01", "Materialized")
    ], shown
    assert re.findall(r'>Job</span>.*?<a href="[^"]*">([^<]*)</a>', partition, flags=re.S) == ["orders"], shown
    recorded = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey(["lake", "orders"]))
    recorded_metadata = recorded.asset_materialization.metadata
    metadata = _metadata_table(partition)
    assert re.fullmatch(r"[A-Z][a-z]{2} \d{1,2}, \d{1,2}:\d{2}:\d{2} [AP]M UTC", metadata.pop("source_horizon")), shown
    path = str(tmp_path / "out" / "acme" / "orders")
    expected = {
        "rows_transferred": "2",
        "delta_rows_transferred": "2",
        "dagster/row_count": "2",
        "transfer_id": recorded_metadata["transfer_id"].value,  # every window's own, before the commit's record
        "high_watermark": "Jan 1, 2024, 5:00:00 AM UTC",
        "high_watermark_epoch_seconds": "1704085200",
        "high_watermark_exact": "2024-01-01T05:00:00.000001+00:00",
        "window_start": "Jan 1, 2024, 12:00:00 AM UTC",
        "window_end": "Jan 2, 2024, 12:00:00 AM UTC",
        "lower_bound": "Jan 1, 2024, 12:00:00 AM UTC",
        "upper_bound": "Jan 2, 2024, 12:00:00 AM UTC",
        "lookback_seconds": "300",
        "transfer_type": "INCREMENTAL",
        "destination": "acme_delta",
        "recipient": "acme",
        "staged_bytes": str(recorded_metadata["staged_bytes"].value),
        "duration_seconds": str(recorded_metadata["duration_seconds"].value),
        "destination_path": path,
        "dagster/column_schema": "[Show Table Schema]",
        "horizon": "lookback-only",
        "horizon_held_back_seconds": "0",
        "future_dated_rows": "0",
        "delta_table_version": "1",
        "delta_table_path": path,
        "destination_owner": "acme",
        "delta_files_removed": "0",  # the first transfer rewrites nothing
        "delta_bytes_removed": "0",
        "delta_files_added": "1",
        "delta_bytes_added": str(recorded_metadata["delta_bytes_added"].value),
    }
    assert metadata == expected, shown
    assert list(metadata) == list(expected)  # in the order the transfer recorded them
    assert re.fullmatch(TRANSFER_ID_PATTERN, metadata["transfer_id"])


def _metadata_table(dom: str) -> dict[str, str]:
    """The partition page's metadata table as a reader sees it: each entry's name -> its shown text, in order."""
    [table] = re.findall(r'<table class="AssetEventMetadataEntriesTable_[^"]*">(.*?)</table>', dom, flags=re.S)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S) for row in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)]
    return {page_text(cells[0]): page_text(cells[1]) for cells in rows}

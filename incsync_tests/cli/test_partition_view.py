"""The partition view after a first sync by the command line (docs/design.md#the-partition-view): a recipient
without a transfer record is re-synced from its start as one full refresh, and every window of that span is
marked delivered with its own rows, so the UI counts no window missing that was delivered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from incsync.cli.main import main
from incsync.operations.dagster_compat.partition_status import partition_status, status_key
from incsync.operations.instance import dagster_instance
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import delta_rows, lake_config, order, write_table

MODEL = dg.AssetKey(["lake", "orders"])
TWO = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]


def test_a_first_sync_by_the_command_line_marks_every_delivered_window(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=12)
    day = lambda n, hour=1: start + timedelta(days=n, hours=hour)  # noqa: E731
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", day(0)), order(2, "org_1", day(0, 5)), order(3, "org_1", day(4)), order(4, "org_1", day(11)),
        order(5, "org_2", day(7)),
    ])
    config = lake_config(tmp_path, recipients=TWO, model={"min_start_time_epoch": int(start.timestamp())})

    assert main(["transfer", "orders", "-c", str(config)]) == 0  # the tick's two windows, no transfer record yet

    capsys.readouterr()
    assert sorted(r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")) == [1, 2, 3, 4]
    instance = dagster_instance(config)
    windows = [(start + timedelta(days=n)).strftime("%Y-%m-%d") for n in range(13)]  # the model's start to today
    every = {f"{rid}|{w}" for rid in ("acme", "globex") for w in windows}
    assert instance.get_materialized_partitions(MODEL) == every
    # What the UI counts missing: the asset's partitions (both recipients, every window Dagster lists) not materialized.
    partitions = build_definitions(config).resolve_assets_def(MODEL).partitions_def
    assert set(partitions.get_partition_keys(dynamic_partitions_store=instance)) - every == set()
    counts = {}
    for record in instance.fetch_materializations(MODEL, limit=100).records:
        m = record.asset_materialization
        counts[m.partition] = m.metadata["rows_transferred"].value
    assert [counts[f"acme|{w}"] for w in windows] == [2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    assert [counts[f"globex|{w}"] for w in windows] == [0] * 7 + [1] + [0] * 5
    # The run brought the asset's partition status up to its last event when it ended: the asset page reads none
    status = json.loads(instance.run_storage.get_cursor_values({status_key(MODEL)})[status_key(MODEL)])
    assert status["cursor"] == instance.get_asset_records([MODEL])[0].asset_entry.last_materialization_storage_id
    value = partition_status(instance, MODEL, partitions)
    assert (len(value.grids["materialized"]), len(value.grids["failed"]), len(value.grids["in_progress"])) == (26, 0, 0)
    # A later run finds the transfer records: an incremental of the tick's windows, no full refresh again.
    assert main(["transfer", "orders", "-c", str(config)]) == 0
    latest = instance.get_latest_materialization_event(MODEL).asset_materialization
    assert latest.metadata.get("transfer_type").value == "INCREMENTAL"

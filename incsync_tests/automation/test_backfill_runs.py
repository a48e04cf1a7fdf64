"""Runs covering several (window, recipient) partitions: one coalesced transfer per recipient, exact
metadata per partition, committed batches kept when a later one fails."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from incsync.automation.statuses import TransferStatus, list_transfers
from incsync.config_load import load_config
from incsync.project import build_definitions
from incsync.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync_tests.support import delta_rows, lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]


def _run_range(defs: dg.Definitions, instance: dg.DagsterInstance, first: dg.MultiPartitionKey, last: dg.MultiPartitionKey):
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance,
        asset_selection=[MODEL],
        tags={ASSET_PARTITION_RANGE_START_TAG: str(first), ASSET_PARTITION_RANGE_END_TAG: str(last)},
        raise_on_error=False,
    )


def _metadata_by_partition(instance: dg.DagsterInstance) -> dict[str, dict[str, object]]:
    out = {}
    for record in instance.fetch_materializations(MODEL, limit=100).records:
        mat = record.asset_materialization
        out[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    return out


def test_one_run_over_two_windows_and_two_recipients_records_each_transfer_exactly(spark, tmp_path: Path, instance):
    write_table(
        tmp_path / "src", "orders",
        [
            order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(1, 11)), order(3, "org_1", ts(2, 12)),
            order(4, "org_2", ts(1, 9)), order(5, "org_2", ts(2, 8)), order(6, "org_2", ts(2, 9)), order(7, "org_2", ts(2, 10)),
        ],
    )
    defs = build_definitions(lake_config(tmp_path, recipients=RECIPIENTS))
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])

    result = _run_range(defs, instance, partition_key("2024-01-01", "acme"), partition_key("2024-01-02", "globex"))

    assert result.success
    metadata = _metadata_by_partition(instance)
    assert sorted(metadata) == ["acme|2024-01-01", "acme|2024-01-02", "globex|2024-01-01", "globex|2024-01-02"]
    got = {k: (m["rows_transferred"], m["delta_rows_transferred"], m["recipient"], m["window_start"]) for k, m in metadata.items()}
    assert got == {
        "acme|2024-01-01": (2, 2, "acme", ts(1).timestamp()),
        "acme|2024-01-02": (1, 1, "acme", ts(2).timestamp()),
        "globex|2024-01-01": (1, 1, "globex", ts(1).timestamp()),
        "globex|2024-01-02": (3, 3, "globex", ts(2).timestamp()),
    }
    assert metadata["globex|2024-01-02"]["high_watermark_epoch_seconds"] == int(ts(2, 10).timestamp())
    # One read per recipient over both windows (coalesced), each window with its own exact counts.
    ids = {k: m["transfer_id"] for k, m in metadata.items()}
    assert ids["acme|2024-01-01"] == ids["acme|2024-01-02"] != ids["globex|2024-01-01"] == ids["globex|2024-01-02"]
    assert {m["transfer_windows"] for m in metadata.values()} == {2}
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2, 3]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "globex" / "orders")] == [4, 5, 6, 7]
    config = load_config(tmp_path / "incsync.yaml")
    [transfer] = list_transfers(instance, config, recipient="globex")
    assert (transfer.status, transfer.recipients, transfer.partitions_committed, transfer.rows_transferred) == (
        TransferStatus.SUCCESS, ("acme", "globex"), 4, 7
    )


def test_a_failed_window_keeps_the_committed_ones_and_a_backfill_resumes_at_it(spark, tmp_path: Path, instance):
    rows = [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(2, 10)), order(2, "org_1", ts(2, 11)), order(3, "org_1", ts(3, 10))]
    write_table(tmp_path / "src", "orders", rows)
    # One window per commit, so the bad second window leaves the first committed.
    config_file = lake_config(tmp_path, recipients=RECIPIENTS[:1], model={"max_rows_per_batch": 1})
    defs = build_definitions(config_file)
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])

    failed = _run_range(defs, instance, partition_key("2024-01-01", "acme"), partition_key("2024-01-03", "acme"))

    assert not failed.success
    assert instance.get_materialized_partitions(MODEL) == {"acme|2024-01-01"}
    assert _metadata_by_partition(instance)["acme|2024-01-01"]["rows_transferred"] == 1
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1]
    [transfer] = list_transfers(instance, load_config(config_file))
    assert (transfer.status, transfer.recipients, transfer.partitions_committed) == (TransferStatus.PARTIAL_FAILURE, ("acme",), 1)

    # What a backfill retried from failure requests: the failed window and the ones after it.
    write_table(tmp_path / "src", "orders", [rows[0], rows[2], rows[3]])
    retried = _run_range(defs, instance, partition_key("2024-01-02", "acme"), partition_key("2024-01-03", "acme"))
    assert retried.success
    assert instance.get_materialized_partitions(MODEL) == {"acme|2024-01-01", "acme|2024-01-02", "acme|2024-01-03"}
    assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [
        (1, ts(1, 10)), (2, ts(2, 11)), (3, ts(3, 10))
    ]

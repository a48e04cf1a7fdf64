"""The integrity check is partitioned like its model (window × recipient, the recipient dimension dynamic),
so a recipient whose copy fails shows failed on its own partitions in the asset's check view, read through
GraphQL as the UI reads it (``AssetCheck.partitionStatuses``), and its neighbour's stay passed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster_graphql.test.utils import execute_dagster_graphql
from deltalake import DeltaTable

from incsync.config.tags import INCREMENTAL, MODE_TAG
from incsync.operations.dagster_compat import event_log_storage_config
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
CHECK = dg.AssetCheckKey(MODEL, "integrity")
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]

CHECK_STATUSES = """
query CheckPartitions($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks {
          checks {
            name
            partitionDefinition { dimensionTypes { name dynamicPartitionsDefinitionName } }
            partitionStatuses {
              __typename
              ... on AssetCheckMultiPartitionStatuses {
                primaryDimensionName
                ranges {
                  primaryDimStartKey primaryDimEndKey
                  secondaryDim {
                    __typename
                    ... on AssetCheckDefaultPartitionStatuses {
                      succeededPartitions failedPartitions inProgressPartitions skippedPartitions executionFailedPartitions
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}
"""


@pytest.fixture
def location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[object, dg.Definitions]]:
    """The definitions of a two-recipient model checked after each transfer, and the UI's view of them over
    the same (SQLite) instance."""
    monkeypatch.setenv("INCSYNC_AUTOMATION", "stopped")
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(1, 11)),
                                             order(3, "org_2", ts(1, 12)), order(4, "org_1", ts(2, 9)),
                                             order(5, "org_2", ts(2, 10))])
    config = lake_config(tmp_path, recipients=RECIPIENTS, model={"integrity_check": "after_transfer"})
    module = tmp_path / "defs.py"
    module.write_text(f"from incsync.orchestration.definitions import build_definitions\n\ndefs = build_definitions({str(config)!r})\n")
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(python_file=str(module), working_directory=str(tmp_path)),
        location_name="incsync",
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    overrides = {"event_log_storage": event_log_storage_config(home)}  # incsync's SQLite event log, as `make dev` sets
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as context:
            entry = next(iter(context.create_request_context().get_code_location_entries().values()))
            assert entry.code_location is not None, entry.load_error
            instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])
            yield context, build_definitions(str(config))


def _statuses(context) -> dict:  # noqa: ANN001
    # Entered as the webserver enters each request's context (dagster_webserver/graphql.py ``request_context``):
    # that sets the partition loading context the recipients dimension needs.
    with context.create_request_context() as request:
        result = execute_dagster_graphql(request, CHECK_STATUSES, {"assetKey": {"path": MODEL.path}})
    assert result.errors is None, result.errors
    [check] = result.data["assetNodeOrError"]["assetChecksOrError"]["checks"]
    assert check["name"] == "integrity"
    assert check["partitionDefinition"]["dimensionTypes"] == [
        {"name": "recipient", "dynamicPartitionsDefinitionName": "recipients"},
        {"name": "window", "dynamicPartitionsDefinitionName": None},
    ]
    return check["partitionStatuses"]


def _by_windows(statuses: dict) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(first, last window) of each run of windows alike -> the recipient keys of each non-empty status."""
    assert statuses["__typename"] == "AssetCheckMultiPartitionStatuses" and statuses["primaryDimensionName"] == "window"
    return {(r["primaryDimStartKey"], r["primaryDimEndKey"]): {k: v for k, v in r["secondaryDim"].items() if k != "__typename" and v}
            for r in statuses["ranges"]}


def test_a_recipients_failed_check_shows_on_its_own_partitions(location, spark, tmp_path: Path) -> None:
    context, defs = location
    instance = context.instance

    def transfer(job: str, first: str, last: str, **tags: str) -> list[tuple[str, bool]]:
        """A transfer run over a range of partitions, as the schedules and backfills batch them; the check
        runs in it (``after_transfer``): its evaluations."""
        run = defs.resolve_job_def(job).execute_in_process(instance=instance, tags={
            "dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last, **tags})
        return sorted((e.partition, e.passed) for e in run.get_asset_check_evaluations())

    # A backfill from the asset page (Dagster's implicit job, which plans the check's partitions) ...
    assert transfer("__ASSET_JOB", "acme|2024-01-01", "globex|2024-01-02") == [
        ("acme|2024-01-01", True), ("acme|2024-01-02", True), ("globex|2024-01-01", True), ("globex|2024-01-02", True)]
    assert _by_windows(_statuses(context)) == {("2024-01-01", "2024-01-02"): {"succeededPartitions": ["acme", "globex"]}}

    # acme's copy is tampered with; the check alone (its schedule's job, or a launch from the UI) finds it and
    # records each recipient on its first window (standing for its whole copy, and not rewritten by the next tick).
    DeltaTable(str(tmp_path / "out/acme/orders")).update({"status": "'tampered'"}, predicate="id = 2")
    alone = defs.resolve_job_def("__ASSET_JOB").get_subset(asset_check_selection={CHECK}, asset_selection=set())
    checked = alone.execute_in_process(instance=instance)
    assert sorted((e.partition, e.passed, e.metadata["total_rows_incorrect"].value)
                  for e in checked.get_asset_check_evaluations()) == [
        ("acme|2024-01-01", False, 1), ("globex|2024-01-01", True, 0)]
    assert _by_windows(_statuses(context)) == {
        ("2024-01-01", "2024-01-01"): {"succeededPartitions": ["globex"], "failedPartitions": ["acme"]},
        ("2024-01-02", "2024-01-02"): {"succeededPartitions": ["acme", "globex"]},
    }

    # ... and the next tick of the schedule (the model's job, whose asset events incsync reports itself, no
    # planned ones) transfers the latest window again and checks it: acme fails there too, and the first
    # window keeps its result.
    assert transfer("orders", "acme|2024-01-02", "globex|2024-01-02", **{MODE_TAG: INCREMENTAL}) == [
        ("acme|2024-01-02", False), ("globex|2024-01-02", True)]
    assert _by_windows(_statuses(context)) == {
        ("2024-01-01", "2024-01-02"): {"succeededPartitions": ["globex"], "failedPartitions": ["acme"]}}
    # The instance's record of each partition's latest execution says the same.
    latest: dict[str | None, str] = {}
    for record in instance.event_log_storage.get_asset_check_execution_history(CHECK, limit=20):  # newest first
        latest.setdefault(record.partition, record.status.value)
    # (The check-only run's planned event names no partition: Dagster plans a run without one that way, and
    # its partition view skips a key that is not the check's.)
    assert latest == {"acme|2024-01-01": "FAILED", "acme|2024-01-02": "FAILED", "globex|2024-01-01": "SUCCEEDED",
                      "globex|2024-01-02": "SUCCEEDED", None: "PLANNED"}


def test_the_check_view_reads_the_recipients_once_however_many_have_results(location, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster asks whether each checked partition's recipient exists one query at a time; incsync's event log
    answers from the recipients' keys read once (``dagster_compat.check_state``): 38 s at
    10,000 recipients before, on a loaded 2-core host."""
    context, _ = location
    instance = context.instance
    recipients = [f"r{i:03d}" for i in range(300)]
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, recipients)
    for i, rid in enumerate(recipients):  # results as the check records them (no transfer: no target to name)
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(
            asset_key=MODEL, check_name="integrity", passed=i % 100 != 7, partition=str(partition_key("2024-01-03", rid))))
    asked: list[str] = []
    single = instance.has_dynamic_partition
    monkeypatch.setattr(instance, "has_dynamic_partition", lambda name, key: asked.append(key) or single(name, key))

    statuses = _by_windows(_statuses(context))

    assert statuses == {("2024-01-03", "2024-01-03"): {
        "succeededPartitions": [r for i, r in enumerate(recipients) if i % 100 != 7],
        "failedPartitions": ["r007", "r107", "r207"]}}
    assert asked == []

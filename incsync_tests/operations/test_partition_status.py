"""The asset page's partition stats and health bar of a model's (window × recipient) asset (issue 50): incsync's
event logs answer them from bit masks per window (``dagster_compat.partition_status``), the same answers
Dagster's own storage gives over the same events, at a cost that does not grow with the partitions.

Each instance pair is one instance's data read twice: through incsync's event log (what ``incsync dagster-yaml``
names) and through Dagster's own (SQLite, dagster-postgres), over the same files or database."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from incsync.operations.dagster_compat import (
    DEFER_ASSET_EVENTS_TAG,
    materialization_reporter,
    partition_status,
    refresh_partition_status,
    report_planned,
)
from incsync.operations.dagster_compat.grid_subset import GridSubset
from incsync.operations.dagster_compat.partition_status import status_key
from incsync_tests.support.destinations import postgres_database

KEY = dg.AssetKey(["app_db", "orders"])
WINDOWS = 12
RECIPIENTS = [f"r{k:03d}" for k in range(30)]
DEFS = '''
import dagster as dg
from datetime import datetime, timedelta, timezone

today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
windows = dg.TimeWindowPartitionsDefinition(start=today - timedelta(days={days}), cron_schedule="0 0 * * *",
                                            fmt="%Y-%m-%d", timezone="UTC", end_offset=1)
parts = dg.MultiPartitionsDefinition({{"window": windows, "recipient": dg.DynamicPartitionsDefinition(name="recipients")}})

@dg.asset(key=["app_db", "orders"], partitions_def=parts)
def orders() -> None: ...

defs = dg.Definitions(assets=[orders])
'''
QUERY = """
query Page($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      partitionStats { numMaterialized numPartitions numFailed numMaterializing }
      assetPartitionStatuses {
        __typename
        ... on MultiPartitionStatuses {
          primaryDimensionName
          ranges {
            primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
            secondaryDim {
              __typename
              ... on DefaultPartitionStatuses {
                materializedPartitions failedPartitions unmaterializedPartitions materializingPartitions
              }
            }
          }
        }
      }
    }
  }
}
"""


def _storages(kind: str, home: Path, url: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dagster.yaml of incsync's instance and of Dagster's own over the same data."""
    if kind == "postgres":
        pg = {"postgres_url": url}
        incsync = {"module": "incsync.operations.dagster_compat", "class": "CompactPostgresEventLogStorage", "config": pg}
        dagster = {"module": "dagster_postgres.event_log", "class": "PostgresEventLogStorage", "config": pg}
        runs = {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage", "config": pg}
    else:
        base = {"base_dir": str(home / "history" / "runs")}
        incsync = {"module": "incsync.operations.dagster_compat", "class": "BatchingSqliteEventLogStorage", "config": base}
        dagster = {"module": "dagster._core.storage.event_log", "class": "SqliteEventLogStorage", "config": base}
        runs = {"module": "dagster._core.storage.runs", "class": "SqliteRunStorage", "config": {"base_dir": str(home / "history")}}
    return {"run_storage": runs, "event_log_storage": incsync}, {"run_storage": runs, "event_log_storage": dagster}


@contextlib.contextmanager
def _pair(kind: str, tmp_path: Path) -> Iterator[tuple[dg.DagsterInstance, dg.DagsterInstance]]:
    with contextlib.ExitStack() as stack:
        url = None
        if kind == "postgres":
            url = "postgresql+psycopg2://" + stack.enter_context(postgres_database()).split("://", 1)[1]
        instances = []
        for name, doc in zip(("incsync", "dagster"), _storages(kind, tmp_path / "data", url), strict=True):
            home = tmp_path / name
            home.mkdir()
            (home / "dagster.yaml").write_text(yaml.safe_dump(doc))
            instances.append(stack.enter_context(dg.DagsterInstance.from_config(str(home))))
        yield instances[0], instances[1]


@contextlib.contextmanager
def _page(instance: dg.DagsterInstance, tmp_path: Path, name: str) -> Iterator[Any]:
    module = tmp_path / f"defs_{name}.py"
    module.write_text(DEFS.format(days=WINDOWS - 1))
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(python_file=str(module), working_directory=str(tmp_path)), location_name=name)
    with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as context:
        yield lambda: _ask(context)


def _ask(context: Any) -> dict[str, Any]:
    result = execute_dagster_graphql(context.create_request_context(), QUERY, {"assetKey": {"path": KEY.path}})
    assert not result.errors, result.errors
    return result.data["assetNodeOrError"]


def _keys(partitions_def: dg.MultiPartitionsDefinition, windows: list[str], recipients: list[str]) -> list[str]:
    return [str(dg.MultiPartitionKey({"window": w, "recipient": r})) for r in recipients for w in windows]


def _partitions_def(instance: dg.DagsterInstance, tmp_path: Path) -> dg.MultiPartitionsDefinition:
    namespace: dict[str, Any] = {}
    exec(DEFS.format(days=WINDOWS - 1), namespace)  # noqa: S102 - the test's own definitions module
    return namespace["parts"]


def _run(instance: dg.DagsterInstance, partitions_def: dg.MultiPartitionsDefinition, *, materialize: list[str] = (),
         plan: list[str] = (), fail: bool = False, refresh: bool = False) -> str:
    """A run of the model's asset storing its materializations the way a model's run does
    (``materialization_reporter``) and planning ``plan``; failed when ``fail``; with ``refresh``, bringing the
    partition status up to date at its end, as a model's run does (``RunReporter.for_output``)."""

    class Reporting(dg.ConfigurableIOManager):
        def handle_output(self, context: dg.OutputContext, obj: int) -> None:
            if materialize:
                materialization_reporter(context)([
                    dg.AssetMaterialization(asset_key=KEY, partition=k, metadata={"rows_transferred": 0, "transfer_id": "t1"})
                    for k in materialize])
            if plan:
                report_planned(context.step_context, KEY, list(plan))
            if refresh:
                refresh_partition_status(context)
            if fail:
                raise RuntimeError("the planned windows failed")

        def load_input(self, context: dg.InputContext) -> None:
            return None

    @dg.asset(key=KEY, partitions_def=partitions_def, io_manager_key="reporting")
    def orders() -> int:
        return 1

    first = partitions_def.get_partition_keys(dynamic_partitions_store=instance)[0]
    result = dg.materialize([orders], instance=instance, partition_key=first, resources={"reporting": Reporting()},
                            tags={DEFER_ASSET_EVENTS_TAG: "true"}, raise_on_error=False)
    return result.run_id


def _in_progress(instance: dg.DagsterInstance, keys: list[str]) -> None:
    """A run still going on that planned ``keys``."""
    run = instance.add_run(dg.DagsterRun(job_name="orders", run_id="a" * 8 + "-0000-0000-0000-000000000000",
                                         status=dg.DagsterRunStatus.STARTED))
    for k in keys:
        event = DagsterEvent.build_asset_materialization_planned_event("orders", "orders", AssetMaterializationPlannedData(KEY, partition=k))
        instance.report_dagster_event(event, run.run_id)


def _counts(answer: dict[str, Any]) -> dict[str, int]:
    stats = answer["partitionStats"]
    health = {"materialized": 0, "failed": 0, "materializing": 0}
    for r in answer["assetPartitionStatuses"]["ranges"]:
        width = (r["primaryDimEndTime"] - r["primaryDimStartTime"]) // 86400
        for status in health:
            health[status] += int(width) * len(r["secondaryDim"][f"{status}Partitions"])
    return {"partitions": stats["numPartitions"], "materialized": stats["numMaterialized"], "failed": stats["numFailed"],
            "materializing": stats["numMaterializing"], **{f"health_{k}": v for k, v in health.items()}}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_partition_stats_and_health_are_dagsters_answers_from_bit_masks(kind: str, tmp_path: Path) -> None:
    with _pair(kind, tmp_path) as (ours, theirs):
        parts = _partitions_def(ours, tmp_path)
        ours.add_dynamic_partitions("recipients", RECIPIENTS)
        windows = parts.primary_dimension.partitions_def.get_partition_keys()
        assert len(windows) == WINDOWS
        # day one: every recipient's windows but the last two; three recipients' last-but-two failed
        _run(ours, parts, materialize=_keys(parts, windows[:-2], RECIPIENTS))
        _run(ours, parts, plan=_keys(parts, windows[-2:-1], RECIPIENTS[:3]), fail=True)
        _in_progress(ours, _keys(parts, windows[-1:], RECIPIENTS[3:5]))
        with _page(ours, tmp_path, "ours") as ask_ours, _page(theirs, tmp_path, "theirs") as ask_theirs:
            dagsters = ask_theirs()  # as an instance from before: Dagster's status of every key in the asset's row
            assert ours.get_asset_records([KEY])[0].asset_entry.cached_status is not None
            answer = ask_ours()
            assert _counts(answer) == {"partitions": 360, "materialized": 300, "failed": 3, "materializing": 2,
                                       "health_materialized": 300, "health_failed": 3, "health_materializing": 2}
            # kept in the key-value table; the asset's row no longer holds Dagster's, which lists every key
            assert ours.get_asset_records([KEY])[0].asset_entry.cached_status is None
            assert ours.run_storage.get_cursor_values({status_key(KEY)})[status_key(KEY)]
            assert answer == dagsters
            assert [(r["primaryDimStartKey"], r["primaryDimEndKey"]) for r in answer["assetPartitionStatuses"]["ranges"]] == [
                (windows[0], windows[-3]), (windows[-2], windows[-2]), (windows[-1], windows[-1])]

            # the next day: the failed windows delivered, the run in progress done, a new recipient
            ours.add_dynamic_partitions("recipients", ["r999"])
            _run(ours, parts, materialize=_keys(parts, windows[-2:-1], RECIPIENTS[:3]) + _keys(parts, windows[-1:], RECIPIENTS[3:5])
                 + _keys(parts, windows, ["r999"]))
            ours.report_run_failed(ours.get_run_by_id("a" * 8 + "-0000-0000-0000-000000000000"))
            answer = ask_ours()
            assert _counts(answer) == {"partitions": 372, "materialized": 317, "failed": 0, "materializing": 0,
                                       "health_materialized": 317, "health_failed": 0, "health_materializing": 0}
            assert answer == ask_theirs()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_planned_attempts_without_materializations_are_dagsters(kind: str, tmp_path: Path) -> None:
    with _pair(kind, tmp_path) as (ours, _theirs):
        parts = _partitions_def(ours, tmp_path)
        ours.add_dynamic_partitions("recipients", RECIPIENTS[:4])
        windows = parts.primary_dimension.partitions_def.get_partition_keys()
        keys = _keys(parts, windows[:3], RECIPIENTS[:4])
        _run(ours, parts, plan=keys[:6], fail=True)
        _run(ours, parts, materialize=keys[:2])  # two of the failed ones delivered later
        cursor = ours.get_asset_records([KEY])[0].asset_entry.last_materialization_storage_id
        _run(ours, parts, plan=keys[4:9], fail=True)  # planned again, and more
        storage = ours.event_log_storage
        for after in (None, cursor, cursor + 1_000_000):
            found = storage.get_latest_asset_partition_materialization_attempts_without_materializations(KEY, after)
            assert found == SqlEventLogStorage.get_latest_asset_partition_materialization_attempts_without_materializations(
                storage, KEY, after)
        assert sorted(storage.get_latest_asset_partition_materialization_attempts_without_materializations(KEY)) == sorted(
            keys[2:9])


def test_a_page_reads_no_partition_key_once_its_status_is_current(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer's cost follows the windows and the recipients, not their product: once the status is current,
    a page reads no event and builds no partition key; after a run, it reads that run's events only."""
    read: list[int] = []
    keys_built: list[int] = []
    parse = dg.MultiPartitionsDefinition.get_partition_key_from_str
    enumerate_keys = GridSubset.get_partition_keys
    monkeypatch.setattr(dg.MultiPartitionsDefinition, "get_partition_key_from_str",
                        lambda self, key: keys_built.append(1) or parse(self, key))
    monkeypatch.setattr(GridSubset, "get_partition_keys", lambda self: keys_built.append(1) or enumerate_keys(self))
    with _pair("sqlite", tmp_path) as (ours, _theirs):
        parts = _partitions_def(ours, tmp_path)
        ours.add_dynamic_partitions("recipients", RECIPIENTS)
        windows = parts.primary_dimension.partitions_def.get_partition_keys()
        _run(ours, parts, materialize=_keys(parts, windows, RECIPIENTS))
        since = partition_status.materialized_since
        monkeypatch.setattr(partition_status, "materialized_since",
                            lambda *a: (found := list(since(*a)), read.append(len(found)))[0])
        with _page(ours, tmp_path, "ours") as ask:
            assert _counts(ask())["materialized"] == 360
            assert read == [360]
            read.clear()
            keys_built.clear()
            for _ in range(3):
                assert _counts(ask())["materialized"] == 360
            assert (read, keys_built) == ([], [])
            _run(ours, parts, materialize=_keys(parts, windows[-1:], RECIPIENTS[:7]))  # delivered again
            keys_built.clear()
            assert _counts(ask())["materialized"] == 360
            assert (read, keys_built) == ([7], [])
            read.clear()
            # a model's run brings the status up to date when it ends: the page then reads nothing
            _run(ours, parts, materialize=_keys(parts, windows[:2], RECIPIENTS[:5]), refresh=True)
            assert read == [10]
            read.clear()
            keys_built.clear()
            assert _counts(ask())["materialized"] == 360
            assert (read, keys_built) == ([], [])

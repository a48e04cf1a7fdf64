"""Pins the Dagster and storage behaviour incsync/operations/dagster_compat.py relies on."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest
import sqlalchemy
import yaml

from incsync.errors import ConfigError
from incsync.operations.dagster_compat import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    DEFER_ASSET_EVENTS_TAG,
    RUN_FAILURE_REASON_TAG,
    WORKER_LOST_REASONS,
    add_partition_metadata,
    defers_asset_events,
    event_log_storage_config,
    load_as_code_location,
    report_materialized,
    report_planned,
    report_run_orphaned,
    run_reaction,
)

DAYS = dg.StaticPartitionsDefinition(["a", "b", "c"])


class _RecordingIOManager(dg.ConfigurableIOManager):
    def handle_output(self, context: dg.OutputContext, obj: dict[str, int]) -> None:
        add_partition_metadata(context, {key: {"rows": dg.MetadataValue.int(n)} for key, n in obj.items()})

    def load_input(self, context: dg.InputContext) -> None:
        return None


@dg.asset(partitions_def=DAYS, io_manager_key="recording")
def counted(context) -> dict[str, int]:  # noqa: ANN001 - Dagster reads the annotation itself
    return {key: ord(key) for key in context.partition_keys}


def test_loading_as_a_code_location_refuses_what_dagster_refuses_and_building_them_does_not() -> None:
    """An asset's op is named after its key and shares one namespace with the jobs: `Definitions(...)` builds,
    the code location does not load. Clean definitions load."""

    @dg.asset(key="log")
    def log() -> None: ...

    @dg.multi_asset(name="append_log", specs=[dg.AssetSpec("log")])
    def renamed() -> None: ...

    clash = dg.Definitions(assets=[log], jobs=[dg.define_asset_job("log", selection=["log"])])
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="Conflicting definitions found in repository with name 'log'"):
        load_as_code_location(clash)
    load_as_code_location(dg.Definitions(assets=[renamed], jobs=[dg.define_asset_job("log", selection=["log"])]))


def test_each_partition_of_a_range_run_gets_its_own_metadata(dagster_instance) -> None:
    result = dg.materialize(
        [counted], instance=dagster_instance, resources={"recording": _RecordingIOManager()},
        tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "c"},
    )
    assert result.success
    records = dagster_instance.fetch_materializations(dg.AssetKey("counted"), limit=10).records
    got = {r.asset_materialization.partition: r.asset_materialization.metadata["rows"].value for r in records}
    assert got == {"a": 97, "b": 98, "c": 99}


class _EarlyReportingIOManager(dg.ConfigurableIOManager):
    def handle_output(self, context: dg.OutputContext, obj: dict[str, int]) -> None:
        context.log_event(dg.AssetMaterialization(asset_key=context.asset_key, partition="a", metadata={"rows": obj["a"]}))

    def load_input(self, context: dg.InputContext) -> None:
        return None


def test_dagster_materializes_every_partition_of_the_output_even_when_the_io_manager_reported_one(dagster_instance) -> None:
    """Why a run without ``DEFER_ASSET_EVENTS_TAG`` (an asset-page backfill) gets each partition's metadata
    through ``add_partition_metadata`` at the end and not as a materialization per commit: Dagster emits
    its own materialization for every partition of the output when ``handle_output`` returns, so a
    partition reported at its commit would have two."""
    result = dg.materialize(
        [counted], instance=dagster_instance, resources={"recording": _EarlyReportingIOManager()},
        tags={ASSET_PARTITION_RANGE_START_TAG: "a", ASSET_PARTITION_RANGE_END_TAG: "c"},
    )
    assert result.success
    records = dagster_instance.fetch_materializations(dg.AssetKey("counted"), limit=10, ascending=True).records
    got = [(r.asset_materialization.partition, {k: v.value for k, v in r.asset_materialization.metadata.items()}) for r in records]
    assert got[0] == ("a", {"rows": 97})  # logged while handle_output ran
    assert sorted(got[1:], key=str) == [("a", {}), ("b", {}), ("c", {})]  # Dagster's own, when it returned


class _CommitReportingIOManager(dg.ConfigurableIOManager):
    def handle_output(self, context: dg.OutputContext, obj: dict[str, int]) -> None:
        for key in ("a", "b"):  # "c" is never committed
            report_materialized(context, [dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata={"rows": obj[key]})])
        raise RuntimeError("c failed")

    def load_input(self, context: dg.InputContext) -> None:
        return None


@dg.asset(partitions_def=DAYS, io_manager_key="recording")
def reported(context) -> dict[str, int]:  # noqa: ANN001 - Dagster reads the annotation itself
    if defers_asset_events(context.run):
        report_planned(context.get_step_execution_context(), context.asset_key, context.partition_keys)
    return {key: ord(key) for key in context.partition_keys}


def test_a_run_with_the_defer_tag_leaves_planned_and_materialized_events_to_incsync(dagster_instance) -> None:
    """What a model's job relies on (``assets.model_job``, ``io_manager``): with the tag Dagster plans
    nothing when it creates the run and materializes nothing when the step ends; what incsync reports
    is each partition's only event, and a planned partition left unmaterialized reads as failed."""
    assert DEFER_ASSET_EVENTS_TAG == "dagster/defer_asset_events"
    job = dg.define_asset_job("reported_job", selection=[reported], partitions_def=DAYS, run_tags={DEFER_ASSET_EVENTS_TAG: "true"})
    defs = dg.Definitions(assets=[reported], jobs=[job], resources={"recording": _CommitReportingIOManager()})
    result = defs.resolve_job_def("reported_job").execute_in_process(
        instance=dagster_instance, tags={ASSET_PARTITION_RANGE_START_TAG: "a", ASSET_PARTITION_RANGE_END_TAG: "c"}, raise_on_error=False,
    )
    assert not result.success
    kinds = [(r.event_log_entry.dagster_event_type, r.event_log_entry.dagster_event.partition)
             for r in dagster_instance.get_records_for_run(result.run_id, limit=None).records
             if r.event_log_entry.dagster_event_type in (dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, dg.DagsterEventType.ASSET_MATERIALIZATION)]
    planned, materialized = dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, dg.DagsterEventType.ASSET_MATERIALIZATION
    assert sorted(kinds[:3]) == [(planned, "a"), (planned, "b"), (planned, "c")]
    assert kinds[3:] == [(materialized, "a"), (materialized, "b")]
    records = dagster_instance.fetch_materializations(dg.AssetKey("reported"), limit=10).records
    assert {r.asset_materialization.partition: r.asset_materialization.metadata["rows"].value for r in records} == {"a": 97, "b": 98}
    attempts = dagster_instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(dg.AssetKey("reported"))
    assert {key: run_id for key, (run_id, _event) in attempts.items()} == {"c": result.run_id}
    assert not defers_asset_events(None)


def test_the_range_tags_make_a_run_over_the_partitions_between_them(dagster_instance) -> None:
    """``incsync.operations.launch`` runs a box of partitions in one run by these tags; ``automation.statuses`` reads them."""
    assert (ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG) == (
        "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
    )
    result = dg.materialize(
        [counted], instance=dagster_instance, resources={"recording": _RecordingIOManager()},
        tags={ASSET_PARTITION_RANGE_START_TAG: "b", ASSET_PARTITION_RANGE_END_TAG: "c"},
    )
    assert result.success
    assert dagster_instance.get_materialized_partitions(dg.AssetKey("counted")) == {"b", "c"}
    run = dagster_instance.get_run_by_id(result.run_id)
    assert (run.tags[ASSET_PARTITION_RANGE_START_TAG], run.tags[ASSET_PARTITION_RANGE_END_TAG]) == ("b", "c")


def test_an_orphaned_run_fails_with_a_reason_that_says_its_worker_was_lost(dagster_instance) -> None:
    """``liveness.reap`` marks a dead transfer's run this way; ``statuses`` reads the reason back as ORPHANED."""
    from dagster._core.storage.dagster_run import DagsterRun

    assert WORKER_LOST_REASONS == {"START_TIMEOUT", "RUN_WORKER_RESTART", "UNEXPECTED_TERMINATION"}
    assert RUN_FAILURE_REASON_TAG == "dagster/failure_reason"
    run = dagster_instance.add_run(DagsterRun(job_name="orders", run_id="orphan-1", status=dg.DagsterRunStatus.STARTED))
    storage = dagster_instance.event_log_storage
    storage.set_concurrency_slots("source_lake", 1)
    assert storage.claim_concurrency_slot("source_lake", "orphan-1", "lake__orders").is_claimed
    report_run_orphaned(dagster_instance, run, "incsync: its process is gone")
    after = dagster_instance.get_run_by_id("orphan-1")
    assert after.status == dg.DagsterRunStatus.FAILURE
    assert after.tags[RUN_FAILURE_REASON_TAG] == "UNEXPECTED_TERMINATION"
    [failure] = dagster_instance.all_logs("orphan-1", of_type=dg.DagsterEventType.RUN_FAILURE)
    assert failure.dagster_event.message == "incsync: its process is gone"
    assert storage.get_concurrency_info("source_lake").active_slot_count == 0  # the dead run's pool slot is free


def test_a_plain_sensor_reacts_to_a_failed_run_as_a_run_failure_sensor_does(dagster_instance) -> None:
    """``alerts`` yields these for the runs it posted: the daemon logs each in its run and counts the tick a success."""
    from dagster._core.storage.dagster_run import DagsterRun

    run = dagster_instance.add_run(DagsterRun(job_name="orders", run_id="failed-1", status=dg.DagsterRunStatus.FAILURE))

    @dg.sensor(name="reacts")
    def reacts(context: dg.SensorEvaluationContext):  # noqa: ANN202, ARG001 - a sensor's generator
        yield run_reaction(run)

    data = reacts.evaluate_tick(dg.build_sensor_context(instance=dagster_instance))
    [reaction] = data.dagster_run_reactions
    assert (reaction.dagster_run.run_id, reaction.run_status, reaction.error) == ("failed-1", dg.DagsterRunStatus.FAILURE, None)
    assert data.skip_message is None and data.run_requests == []


def test_the_batching_event_log_commits_as_its_instance_says_and_nothing_else_does(tmp_path, monkeypatch) -> None:
    """dagster.yaml's ``synchronous`` (default off) sets the event log's own connections; any other SQLite
    connection keeps SQLite's default; a mode SQLite lacks, or the environment variable that chose it once,
    is refused naming the setting."""
    from incsync.operations.dagster_compat import BatchingSqliteEventLogStorage

    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)  # the storage sets it; restored after the test
    modes = {}
    for name, setting in (("default", {}), ("normal", {"synchronous": "normal"}), ("bare_yaml_off", {"synchronous": False}),
                          ("full", {"synchronous": "FULL"})):
        home = tmp_path / name
        home.mkdir()
        storage = {**BATCHING, "config": {"base_dir": str(home / "runs"), **setting}}
        with dg.instance_for_test(temp_dir=str(home), overrides={"event_log_storage": storage}) as instance:
            with instance.event_log_storage.index_connection() as conn:
                modes[name] = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    assert modes == {"default": 0, "normal": 1, "bare_yaml_off": 0, "full": 2}  # OFF, NORMAL, FULL
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # another engine: SQLite's default
    engine.dispose()
    assert sqlite3.connect(tmp_path / "y.db").execute("PRAGMA synchronous").fetchone()[0] == 2
    storage_class = BatchingSqliteEventLogStorage
    with pytest.raises(ConfigError, match='event_log_storage.config.synchronous: "sometimes" must be one of off, normal, full'):
        storage_class(str(tmp_path / "bad"), synchronous="sometimes")
    monkeypatch.setenv("INCSYNC_SQLITE_SYNC", "full")
    with pytest.raises(ConfigError, match="INCSYNC_SQLITE_SYNC: .* write `synchronous: full` under event_log_storage.config"):
        storage_class(str(tmp_path / "old"))


BATCHING = {"module": "incsync.operations.dagster_compat", "class": "BatchingSqliteEventLogStorage"}


def _materialize_twice(instance: dg.DagsterInstance) -> list[str]:
    runs = []
    for _ in range(2):
        result = dg.materialize(
            [counted], instance=instance, resources={"recording": _RecordingIOManager()},
            tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "c"},
        )
        assert result.success
        runs.append(result.run_id)
    return runs


def _asset_view(instance: dg.DagsterInstance, runs: list[str]) -> dict[str, object]:
    key = dg.AssetKey("counted")
    records = instance.fetch_materializations(key, limit=10).records
    planned = instance.get_event_records(dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, asset_key=key))
    latest = instance.get_latest_materialization_event(key)
    return {
        "materializations": sorted(
            (runs.index(r.run_id), r.asset_materialization.partition, r.asset_materialization.metadata["rows"].value) for r in records
        ),
        "planned": sorted((runs.index(r.run_id), r.partition_key) for r in planned),
        "latest": (runs.index(latest.run_id), latest.asset_materialization.partition),
        "partitions": sorted(instance.get_materialized_partitions(key)),
        "last_run": runs.index(instance.get_latest_planned_materialization_info(key).run_id),
        "run_events": [len(instance.all_logs(r)) for r in runs],
    }


def test_the_batching_event_log_stores_what_dagsters_own_sqlite_storage_stores(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")  # both storages get their events as batches
    views = []
    for name, overrides in (("stock", {}), ("batching", {"event_log_storage": {**BATCHING, "config": {"base_dir": str(tmp_path / "b" / "runs")}}})):
        home = tmp_path / name
        home.mkdir()
        with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
            assert type(instance.event_log_storage).__name__ == ("BatchingSqliteEventLogStorage" if name == "batching" else "SqliteEventLogStorage")
            views.append(_asset_view(instance, _materialize_twice(instance)))
    stock, batching = views
    assert batching == stock
    assert batching["materializations"] == [(0, "a", 97), (0, "b", 98), (0, "c", 99), (1, "a", 97), (1, "b", 98), (1, "c", 99)]
    assert batching["planned"] == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (1, "c")]
    assert batching["latest"][0] == 1 and batching["last_run"] == 1


def _count_connections(storage, monkeypatch) -> list[str]:  # noqa: ANN001
    """The shards (a run id, or "index") the storage opens from now on, in order."""
    connections: list[str] = []
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    original = SqliteEventLogStorage._connect

    def counting(self, shard):  # noqa: ANN001
        connections.append(shard)
        return original(self, shard)

    monkeypatch.setattr(type(storage), "_connect", counting)
    kept = type(storage)._kept_index_transaction

    def counting_kept(self):  # noqa: ANN001
        connections.append("index")  # a transaction on the index shard, over the connection the storage keeps
        return kept(self)

    monkeypatch.setattr(type(storage), "_kept_index_transaction", counting_kept)
    return connections


def test_the_batching_event_log_writes_a_batch_in_one_transaction_per_shard(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"event_log_storage": event_log_storage_config(tmp_path)}))
    instance = dg.DagsterInstance.get()
    import os

    assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == "10000"  # the storage turns Dagster's batching on
    storage = instance.event_log_storage
    assert storage._base_dir.rstrip("/") == str(tmp_path / "history" / "runs")  # noqa: SLF001 - Dagster's own layout
    connections = _count_connections(storage, monkeypatch)
    assert dg.materialize(
        [counted], instance=instance, resources={"recording": _RecordingIOManager()},
        tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "c"},
    ).success
    run_id = instance.get_runs(limit=1)[0].run_id
    # 3 planned events at launch and 3 materializations at the end: one connection per shard and batch
    planned_and_materialized = [s for s in connections if s in (run_id, "index")]
    assert instance.get_materialized_partitions(dg.AssetKey("counted")) == {"a", "b", "c"}
    assert len(instance.fetch_materializations(dg.AssetKey("counted"), limit=10).records) == 3
    # the index shard: the run's start and success, one batch of planned events, one of materializations
    # (Dagster's own storage opens it once per asset event: 8 here, 2 + 2 per window of a real run)
    assert planned_and_materialized.count("index") == 4
    # the batches' index connection stays open (a closing last connection copies the whole WAL into the database)
    kept = storage._kept_index  # noqa: SLF001 - the one connection it keeps
    assert kept is not None
    instance.dispose()
    assert storage._kept_index is None  # noqa: SLF001 - closed with the instance


CRON_CASES = [
    "*/15 * * * *", "0 0 29 2 *", "0 0 30 2 *", "0 0 31 2 *", "@daily", "@hourly", "* * * * * *", "bad",
    "61 * * * *", "0 0 * * 7", "0 0 L * *", "0 0 * * mon-fri", "0 12 * * 1#2", "0 0 1-31/2 * *", "5 4 * * sun",
]


@pytest.mark.parametrize("expression", CRON_CASES)
def test_incsync_accepts_the_cron_expressions_dagster_schedules_accept(expression: str) -> None:
    """incsync.core.cron checks ``frequency`` without importing Dagster; it must agree with Dagster's rule."""
    from dagster._utils.schedules import is_valid_cron_string

    from incsync.core.cron import is_valid_cron

    assert is_valid_cron(expression) == is_valid_cron_string(expression)


TICKS = [
    datetime(2024, 2, 29, 0, 0, tzinfo=timezone.utc), datetime(2024, 3, 1, 0, 0, tzinfo=timezone.utc),
    datetime(2024, 3, 1, 12, 34, 56, 789_000, tzinfo=timezone.utc), datetime(2023, 3, 1, 0, 0, tzinfo=timezone.utc),
    datetime(2024, 1, 8, 12, 0, tzinfo=timezone.utc), datetime(2024, 12, 31, 23, 59, 59, tzinfo=timezone.utc),
]


@pytest.mark.parametrize("expression", [
    *(e for e in CRON_CASES if e not in ("* * * * * *", "bad", "61 * * * *", "0 0 30 2 *", "0 0 31 2 *")),
    "0 * * * *", "0 0 * * *", "0 */6 * * *", "30 2 1 * *", "0 0 1 * 1", "15,45 8-17 * * 1-5",
])
def test_the_previous_tick_is_the_one_dagster_schedules_ticked_at(expression: str) -> None:
    """The schedules read the window that closed since the previous tick with ``incsync.core.cron.previous_tick``."""
    from dagster._utils.schedules import get_latest_completed_cron_tick

    from incsync.core.cron import is_valid_cron, previous_tick

    assert is_valid_cron(expression)
    for tick in TICKS:
        expected = get_latest_completed_cron_tick(expression, tick - timedelta(seconds=1), "UTC")
        if expression == "0 0 29 2 *" and tick == datetime(2024, 2, 29, tzinfo=timezone.utc):
            # Dagster's leap-day shortcut (the Feb 28 tick, shifted a day) answers the tick itself here.
            assert expected == tick
            expected = datetime(2020, 2, 29, tzinfo=timezone.utc)
        assert previous_tick(expression, tick) == expected, tick
        assert previous_tick(expression, expected + timedelta(minutes=1)) == expected  # a tick itself is "before"


def test_loading_a_config_does_not_import_dagster(tmp_path) -> None:
    import subprocess
    import sys

    from incsync_tests.support.lake import lake_config

    config = lake_config(tmp_path, model={"frequency": "0 0 31 2 *"})
    probe = (
        "import sys\nfrom incsync.config.load import load_config\nfrom incsync.errors import ConfigError\n"
        f"try:\n    load_config({str(config)!r})\nexcept ConfigError as exc:\n    print(exc)\n"
        "print('dagster' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert 'models[0].frequency: "0 0 31 2 *" is not a cron expression' in out
    assert out.rstrip().endswith("False")


def test_a_run_shard_copied_from_the_template_is_the_shard_dagster_creates(tmp_path, monkeypatch) -> None:
    """BatchingSqliteEventLogStorage copies a template for each new run's SQLite shard instead of
    creating its tables and stamping its revision per run; the copy must be what Dagster would make."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from incsync.operations.dagster_compat import BatchingSqliteEventLogStorage

    def shape(path) -> tuple[list[tuple[str, str]], list[tuple[str]], str]:  # noqa: ANN001
        with sqlite3.connect(path) as conn:
            tables = sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall())
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchall()
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return tables, revision, mode

    stock = SqliteEventLogStorage(str(tmp_path / "stock"))
    batching = BatchingSqliteEventLogStorage(str(tmp_path / "batching"))
    for storage in (stock, batching):
        with storage.run_connection("run-1"):
            pass
    copied = shape(tmp_path / "batching" / "run-1.db")
    assert copied == shape(tmp_path / "stock" / "run-1.db")
    assert copied[1] and copied[2] == "wal"
    assert sorted(p.name for p in (tmp_path / "batching").iterdir() if p.suffix == ".db") == ["index.db", "run-1.db"]
    assert batching.get_all_run_ids() == ["run-1"]  # nothing else in the folder looks like a run


@dg.asset(partitions_def=dg.StaticPartitionsDefinition(list("abcdef")), io_manager_key="recording",
          check_specs=[dg.AssetCheckSpec("fine", asset="checked")])
def checked(context):  # noqa: ANN001, ANN201 - Dagster reads the annotations itself
    yield dg.Output({key: ord(key) for key in context.partition_keys})
    yield dg.AssetCheckResult(check_name="fine", passed=True)


def test_a_batch_mixing_asset_and_check_events_still_stores_the_asset_events_together(tmp_path, monkeypatch) -> None:
    """A model with an asset check (incsync's integrity check) plans the check beside its partitions:
    the asset events of that batch must still go in one transaction, not one per window partition."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"event_log_storage": event_log_storage_config(tmp_path)}))
    instance = dg.DagsterInstance.get()
    storage = instance.event_log_storage
    connections = _count_connections(storage, monkeypatch)
    opened = []
    for last in ("c", "f"):  # 3 partitions, then 6
        connections.clear()
        assert dg.materialize(
            [checked], instance=instance, resources={"recording": _RecordingIOManager()},
            tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": last},
        ).success
        opened.append(connections.count("index"))
    assert instance.get_materialized_partitions(dg.AssetKey("checked")) == set("abcdef")
    assert opened[0] == opened[1], opened  # twice the partitions, not one more connection
    instance.dispose()


def test_instance_values_round_trip_through_the_run_storage_key_value_table(dagster_instance) -> None:
    """The recipient sensor keeps its registry state there (``subscriptions``): insert, then update in place."""
    from incsync.operations.dagster_compat import read_instance_value, write_instance_value

    assert read_instance_value(dagster_instance, "incsync/test") is None
    write_instance_value(dagster_instance, "incsync/test", "x" * 100_000)
    write_instance_value(dagster_instance, "incsync/test", '{"a": 1}')
    assert read_instance_value(dagster_instance, "incsync/test") == '{"a": 1}'

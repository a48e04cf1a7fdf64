"""The one home of what incsync needs from Dagster and its storage beyond their public APIs.

Each function names the private behaviour it relies on; ``incsync_tests/orchestration/test_dagster_compat.py`` pins
each one, so a Dagster upgrade that changes it fails there, not silently in a transfer.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason
from dagster._core.storage import tags as _tags

from incsync.errors import ConfigError

# The run tags of a run over a partition range: what a backfill with a BackfillPolicy sets, what
# ``incsync.orchestration.launch`` sets for a run of several partitions and what ``orchestration.statuses`` reads back.
ASSET_PARTITION_RANGE_START_TAG: str = _tags.ASSET_PARTITION_RANGE_START_TAG
ASSET_PARTITION_RANGE_END_TAG: str = _tags.ASSET_PARTITION_RANGE_END_TAG
# A run with this tag set to "true" is one whose asset events its code reports itself: Dagster
# neither stores the planned materializations when it creates the run nor materializes the output's
# partitions when the step ends. Every run of a model's job carries it (``assets.model_job``): its
# IO manager materializes landed commits' windows once a second and plans (marks in progress, then
# failed) only the partitions it is slow on or fails (``report_planned``, ``report_materialized``).
DEFER_ASSET_EVENTS_TAG: str = _tags.EXTERNALLY_MANAGED_ASSETS_TAG
# Why a run failed, as Dagster tags it when the failure event carries a reason.
RUN_FAILURE_REASON_TAG: str = _tags.RUN_FAILURE_REASON_TAG
# The reasons the run monitor (and ``report_run_orphaned``) give a run whose worker died.
WORKER_LOST_REASONS: frozenset[str] = frozenset(
    r.value for r in (RunFailureReason.START_TIMEOUT, RunFailureReason.RUN_WORKER_RESTART, RunFailureReason.UNEXPECTED_TERMINATION)
)


def report_run_orphaned(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Mark an in-progress run failed because its process died, as the run monitor does: the failure
    carries the reason ``UNEXPECTED_TERMINATION``, so the run's ``RUN_FAILURE_REASON_TAG`` tells a
    lost worker from a failed step; the pool slots its steps held are freed (no step will free them)."""
    instance.report_run_failed(run, message, JobFailureData(error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION))
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def add_partition_metadata(context: dg.OutputContext, metadata: Mapping[str, Mapping[str, Any]]) -> None:
    """Attach each partition's own metadata to the materializations Dagster records for the output.

    An IO manager has no public way to do this: ``OutputContext.add_output_metadata`` gives every
    partition the same metadata, and a materialization logged with ``OutputContext.log_event`` (say,
    one per partition as its commit lands) comes on top of the one Dagster emits for every partition
    of the output when ``handle_output`` returns, so each partition would have two (and each such
    event is stored on its own: a 400-window run took 10-12 ms a window with one per committed window,
    1.3-2.8 ms without, November 2026). The asset body's
    ``AssetExecutionContext.add_asset_metadata(partition_key=...)`` recomputes the run's whole
    partition range on every call (O(windows × recipients) each, so quadratic for a run). This sets
    all partitions at once on the step's metadata accumulator, which Dagster reads when it builds each
    partition's materialization at the end of the step (``execute_step._get_output_asset_events``),
    stored as one batch by ``BatchingSqliteEventLogStorage``.
    """
    from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator

    step = context.step_context
    current = step._metadata_accumulator  # noqa: SLF001 - see the docstring
    merged = dict(current.per_output_metadata)
    for partition, values in metadata.items():
        handle = AssetMetadataHandle(asset_key=context.asset_key, partition_key=str(partition))
        merged[handle] = {**merged.get(handle, {}), **values}
    step._metadata_accumulator = OutputMetadataAccumulator(per_output_metadata=merged)  # noqa: SLF001


def defers_asset_events(run: dg.DagsterRun | None) -> bool:
    """Whether ``run`` carries ``DEFER_ASSET_EVENTS_TAG`` (a run of a model's job)."""
    from dagster._core.storage.dagster_run import assets_are_externally_managed

    return run is not None and assets_are_externally_managed(run)


def report_planned(step: Any, asset_key: dg.AssetKey, partition_keys: Sequence[str]) -> None:
    """Store the planned materialization of ``partition_keys`` of ``asset_key`` in the step's run
    (``step``: a ``StepExecutionContext``), one event a partition in one batch, as Dagster does when it
    creates a run without ``DEFER_ASSET_EVENTS_TAG``. A planned partition the run does not materialize
    is what Dagster's partition status shows as in progress while the run goes on and as failed once it
    failed (``get_latest_asset_partition_materialization_attempts_without_materializations``).

    A model's run plans only the partitions it is slow on or failed to commit (``orchestration.reporting``):
    planning every partition when the run starts doubled the stored events of a backfill, where most
    windows are empty and commit within a second (issue 29)."""
    from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id

    batch_id, last = generate_event_batch_id(), len(partition_keys) - 1
    for i, key in enumerate(partition_keys):
        event = DagsterEvent.build_asset_materialization_planned_event(
            step.job_name, step.step.key, AssetMaterializationPlannedData(asset_key, partition=key)
        )
        step.instance.report_dagster_event(event, step.run_id, batch_metadata=DagsterEventBatchMetadata(batch_id, i == last))


def report_materialized(context: dg.OutputContext, materializations: Sequence[dg.AssetMaterialization]) -> None:
    """Log ``materializations`` as the step's events now, stored as one batch (whole commits' windows).

    ``OutputContext.log_event`` would hold them until ``handle_output`` returns and store each on its
    own (10-12 ms apiece); this is what Dagster does with the output's own materializations at the
    end of a step. Called from the run's reporter thread (``reporting.RunReporter``), one call at a time."""
    from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id

    step = context.step_context
    batch_id, last = generate_event_batch_id(), len(materializations) - 1
    for i, materialization in enumerate(materializations):
        DagsterEvent.asset_materialization(step, materialization, batch_metadata=DagsterEventBatchMetadata(batch_id, i == last))


_TUNED = False
SQLITE_SYNC_ENV_VAR = "INCSYNC_SQLITE_SYNC"
_SYNC_MODES = ("off", "normal", "full")


def tune_sqlite_storage() -> None:
    """Let Dagster's SQLite storage write events without an fsync each (``PRAGMA synchronous``).

    Dagster opens, commits and closes a connection per event, and with SQLite's default each commit
    and each close waits for the disk: a run of 400 windows (800 events) spent most of its time in
    fsync here (4-5 ms an event; 0.1 ms without). The default here is ``off``: an application crash
    loses nothing, an operating-system crash or power loss may lose or damage the newest part of the
    run history. incsync's own state (HW, transfer records) lives in each destination, committed with
    the data, and never depends on Dagster's event log; production deployments use PostgreSQL
    storage, which this leaves untouched. ``INCSYNC_SQLITE_SYNC=normal|full`` chooses SQLite's
    safer modes. Uses SQLAlchemy's public ``connect`` event.
    """
    global _TUNED
    mode = os.environ.get(SQLITE_SYNC_ENV_VAR, "off").lower()
    if mode not in _SYNC_MODES:
        raise ConfigError("environment", [f'{SQLITE_SYNC_ENV_VAR}: "{mode}" must be one of {", ".join(_SYNC_MODES)}'])
    if _TUNED or mode == "full":
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA synchronous={mode.upper()}")
            cursor.close()

    _TUNED = True


EVENT_BATCH_ENV_VAR = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = 10_000


def store_events_in_batches() -> None:
    """Let the instance store each batch of asset events at once, whatever its storage.

    Dagster buffers the events it is handed with batch metadata (``report_planned``,
    ``report_materialized``) only while ``DAGSTER_EVENT_BATCH_SIZE`` is set; then dagster-postgres
    inserts a batch of materializations in one statement, and incsync's SQLite event log
    (``BatchingSqliteEventLogStorage``) a batch of asset events in two transactions. Without it every
    event is its own round trip. A value already in the environment is left as it is."""
    os.environ.setdefault(EVENT_BATCH_ENV_VAR, str(EVENT_BATCH_SIZE))


def _batching_sqlite_event_log_storage() -> type:
    """Build the storage class lazily: importing Dagster's SQLite storage costs ~0.3 s."""
    from dagster._core.events import ASSET_EVENTS
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    class BatchingSqliteEventLogStorage(SqliteEventLogStorage):
        """Dagster's SQLite event log, storing a batch of asset events in two transactions.

        A run over a year of daily windows records ~2 asset events per window partition (planned at
        launch, materialized at the end). Dagster hands them over as batches when
        ``DAGSTER_EVENT_BATCH_SIZE`` is set (``EventLogStorage.store_event_batch``), but its SQLite
        storage stores a batch one event at a time: a new engine and two transactions per event, and
        a schema inspection per asset-key update — 12-19 ms an event here, more than the transfer
        itself. This stores the batch's rows in one transaction on the run's shard and one on the
        index shard, with the same rows, tags and asset-key entries as one event at a time (the
        asset-key row is written for the last event of each kind per asset: later ones overwrite
        earlier ones column by column). Anything that is not an asset event goes the stock way.
        """

        def __init__(self, base_dir: str, inst_data: Any = None) -> None:
            os.environ.setdefault(EVENT_BATCH_ENV_VAR, str(EVENT_BATCH_SIZE))
            self._template: str | None = None
            super().__init__(base_dir, inst_data=inst_data)

        @classmethod
        def config_type(cls) -> Any:
            from dagster import StringSource

            return {"base_dir": StringSource}

        @classmethod
        def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
            return cls(inst_data=inst_data, **config_value)

        def _initdb(self, engine: Any, for_index_shard: bool = False) -> None:
            """A new run's shard is a copy of a template shard made once per process: Dagster creates
            each table and stamps the migration revision (alembic) for every run, ~1/2 of launching a
            run from a schedule tick. The copy has the same schema, revision and WAL mode; a shard that
            exists already (another process made it) or the index shard take Dagster's path."""
            path = engine.url.database
            if for_index_shard or not path or os.path.exists(path):
                return super()._initdb(engine, for_index_shard=for_index_shard)
            partial = f"{path}.{os.getpid()}.partial"
            shutil.copyfile(self._run_shard_template(), partial)
            try:
                os.link(partial, path)  # never over a shard another process created meanwhile
            except FileExistsError:
                pass
            finally:
                os.unlink(partial)

        def _run_shard_template(self) -> str:
            if self._template is None:
                from sqlalchemy import create_engine
                from sqlalchemy.pool import NullPool

                folder = tempfile.mkdtemp(prefix="incsync-run-shard-")
                template = os.path.join(folder, "template.db")
                engine = create_engine(f"sqlite:///{template}", poolclass=NullPool)
                super()._initdb(engine)
                engine.dispose()
                self._template = template
                atexit.register(shutil.rmtree, folder, ignore_errors=True)
            return self._template

        def store_event_batch(self, events: Any) -> None:
            """Contiguous asset events together, anything else (an asset check's planned event in the
            same batch, say) one at a time, in the batch's order."""
            group: list[Any] = []
            for event in events:
                if event.is_dagster_event and event.dagster_event_type in ASSET_EVENTS and event.dagster_event.asset_key:
                    group.append(event)
                    continue
                if group:
                    self._store_asset_events(group)
                    group = []
                self.store_event(event)
            if group:
                self._store_asset_events(group)

        def _store_asset_events(self, events: list[Any]) -> None:
            rows = [self._event_to_row(event) for event in events]
            by_run: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_run.setdefault(row["run_id"], []).append(row)
            for run_id, run_rows in by_run.items():
                with self.run_connection(run_id) as conn:
                    conn.execute(SqlEventLogStorageTable.insert(), run_rows)
            with self.index_transaction() as conn:
                table = SqlEventLogStorageTable
                inserted = conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)
                ids = [row_id for (row_id,) in inserted]
                self._store_asset_event_tags(conn, events, ids)
                last: dict[tuple[str, str], int] = {}
                for i, event in enumerate(events):
                    last[(event.dagster_event.asset_key.to_string(), event.dagster_event_type)] = i
                for i in sorted(last.values()):
                    self._store_asset_event(conn, events[i], ids[i])

    return BatchingSqliteEventLogStorage


def __getattr__(name: str) -> Any:
    # ``module: incsync.orchestration.dagster_compat, class: BatchingSqliteEventLogStorage`` in dagster.yaml
    if name == "BatchingSqliteEventLogStorage":
        cls = _batching_sqlite_event_log_storage()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def event_log_storage_config(dagster_home: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``event_log_storage`` entry of a dagster.yaml for the instance in ``dagster_home``.

    The folder is Dagster's own (``history/runs`` under the instance), so an existing instance keeps
    its history; it is written out because the storage cannot know which instance loads it.
    """
    base_dir = os.path.join(os.path.abspath(dagster_home), "history", "runs", "")
    return {"module": "incsync.orchestration.dagster_compat", "class": "BatchingSqliteEventLogStorage", "config": {"base_dir": base_dir}}


def instance_postgres_url(instance: dg.DagsterInstance) -> str | None:
    """The database URL of a PostgreSQL-backed instance (dagster-postgres's storages keep it as
    ``postgres_url``, resolved from the environment), else None."""
    for storage in (instance.run_storage, instance.event_log_storage):
        url = getattr(storage, "postgres_url", None)
        if isinstance(url, str):
            return url
    return None

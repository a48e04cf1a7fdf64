"""The one home of what incsync needs from Dagster and its storage beyond their public APIs.

Each function names the private behaviour it relies on; ``incsync_tests/operations/test_dagster_compat.py`` pins
each one, so a Dagster upgrade that changes it fails there, not silently in a transfer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason
from dagster._core.storage import tags as _tags

from incsync.operations.dagster_compat.events import MaterializationRows
from incsync.operations.dagster_compat.postgres import is_postgres_event_log, store_planned_on_postgres, store_rows_on_postgres
from incsync.operations.dagster_compat.range_subset import install_range_subsets
from incsync.operations.dagster_compat.sqlite import (  # re-exported: the one compat module
    EVENT_BATCH_ENV_VAR,
    EVENT_BATCH_SIZE,
    SYNCHRONOUS_MODES,
    event_log_storage_config,
)

__all__ = [
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "DEFER_ASSET_EVENTS_TAG",
    "EVENT_BATCH_ENV_VAR",
    "EVENT_BATCH_SIZE",
    "RUN_FAILURE_REASON_TAG",
    "SYNCHRONOUS_MODES",
    "WORKER_LOST_REASONS",
    "BatchingSqliteEventLogStorage",
    "add_partition_metadata",
    "defers_asset_events",
    "event_log_storage_config",
    "install_range_subsets",
    "instance_postgres_url",
    "load_as_code_location",
    "materialization_reporter",
    "refresh_partition_status",
    "report_materialized",
    "report_planned",
    "report_run_orphaned",
    "run_reaction",
    "store_events_in_batches",
]

# The run tags of a run over a partition range: what a backfill with a BackfillPolicy sets, what
# ``incsync.operations.launch`` sets for a run of several partitions and what ``operations.statuses`` reads back.
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


def load_as_code_location(defs: dg.Definitions) -> None:
    """Load ``defs`` as a code location's server does before `dagster dev`, the daemon or `dagster definitions
    validate` can use them, raising Dagster's own error where they would fail: every job resolved and every
    name checked (``Definitions.validate_loadable``: one namespace for jobs, ops and graphs), partition
    mappings checked, then the repository's snapshot built (``RepositorySnap.from_def``, what
    ``dagster._core.remote_representation.code_location.InProcessCodeLocation`` serves)."""
    from dagster._core.remote_representation.external_data import RepositorySnap

    dg.Definitions.validate_loadable(defs)
    RepositorySnap.from_def(defs.get_repository_def())


def report_run_orphaned(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Mark an in-progress run failed because its process died, as the run monitor does: the failure
    carries the reason ``UNEXPECTED_TERMINATION``, so the run's ``RUN_FAILURE_REASON_TAG`` tells a
    lost worker from a failed step; the pool slots its steps held are freed (no step will free them)."""
    instance.report_run_failed(run, message, JobFailureData(error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION))
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def run_reaction(run: dg.DagsterRun) -> Any:
    """What a sensor yields for a failed run it acted on (a ``DagsterRunReaction``), as Dagster's run-status
    sensors do: the daemon writes "Sensor <name> acted on run status FAILURE of run <id>" into the run's
    events and records the tick as a success naming the run. A plain sensor has no public way to."""
    from dagster._core.definitions.run_request import DagsterRunReaction

    return DagsterRunReaction(dagster_run=run, run_status=dg.DagsterRunStatus.FAILURE)


def add_partition_metadata(context: dg.OutputContext, metadata: Mapping[str, Mapping[str, Any]]) -> None:
    """Attach each partition's own metadata to the materializations Dagster records for the output.

    An IO manager has no public way to do this: ``OutputContext.add_output_metadata`` gives every
    partition the same metadata, and a materialization logged with ``OutputContext.log_event`` (say,
    one per partition as its commit lands) comes on top of the one Dagster emits for every partition
    of the output when ``handle_output`` returns, so each partition would have two (and each such
    event is stored on its own, one write per window, which costs more than most windows' transfer).
    The asset body's
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
    step._metadata_accumulator = OutputMetadataAccumulator(per_output_metadata=merged)  # noqa: SLF001 - see the function's docstring


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

    A model's run plans only the partitions it is slow on or failed to commit (``operations.reporting``):
    planning every partition when the run starts would double the stored events of a backfill, where most
    windows are empty and commit at once."""
    from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id

    events = [
        DagsterEvent.build_asset_materialization_planned_event(
            step.job_name, step.step.key, AssetMaterializationPlannedData(asset_key, partition=key)
        )
        for key in partition_keys
    ]
    if events and store_planned_on_postgres(step.instance, step.run_id, events):
        return
    batch_id, last = generate_event_batch_id(), len(events) - 1
    for i, event in enumerate(events):
        step.instance.report_dagster_event(event, step.run_id, batch_metadata=DagsterEventBatchMetadata(batch_id, i == last))


def materialization_reporter(context: dg.OutputContext) -> Callable[[Sequence[dg.AssetMaterialization]], None]:
    """What stores a batch of the output's materializations (whole commits' windows) as the step's
    events, now: rows serialized from a template (``dagster_compat.events``) on incsync's SQLite event
    log and on dagster-postgres', Dagster's own path (``report_materialized``) on any other storage.
    Called from the run's reporter thread (``reporting.RunReporter``), one call at a time."""
    step = context.step_context
    storage = step.instance.event_log_storage
    store = getattr(storage, "store_materialization_rows", None)
    store_all: Callable[[Iterator[tuple[list[dict[str, Any]], Any]]], None]
    if store is not None:  # incsync's SQLite event log: one writer, batch after batch
        def store_all(batches: Iterator[tuple[list[dict[str, Any]], Any]]) -> None:
            for batch in batches:
                store(*batch)
    elif is_postgres_event_log(storage):
        def store_all(batches: Iterator[tuple[list[dict[str, Any]], Any]]) -> None:
            store_rows_on_postgres(storage, batches)
    else:
        return lambda materializations: report_materialized(context, materializations)
    rows = MaterializationRows(step, context.asset_key, compact_text=bool(getattr(storage, "compact_events", False)))

    def report(materializations: Sequence[dg.AssetMaterialization]) -> None:
        if any(m.tags for m in materializations):  # tags are indexed in their own table: Dagster's path
            for at in range(0, len(materializations), _ROWS_PER_INSERT):
                report_materialized(context, materializations[at : at + _ROWS_PER_INSERT])
            return
        store_all(rows.rows(materializations[at : at + _ROWS_PER_INSERT])  # made as they are stored
                  for at in range(0, len(materializations), _ROWS_PER_INSERT))

    return report


_ROWS_PER_INSERT = 1000


def report_materialized(context: dg.OutputContext, materializations: Sequence[dg.AssetMaterialization]) -> None:
    """Log ``materializations`` as the step's events now, stored as one batch, Dagster's way.

    ``OutputContext.log_event`` would hold them until ``handle_output`` returns and store each on its
    own (one write apiece); this is what Dagster does with the output's own materializations at the
    end of a step. Called from the run's reporter thread (``reporting.RunReporter``), one call at a time."""
    from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id

    step = context.step_context
    batch_id, last = generate_event_batch_id(), len(materializations) - 1
    for i, materialization in enumerate(materializations):
        DagsterEvent.asset_materialization(step, materialization, batch_metadata=DagsterEventBatchMetadata(batch_id, i == last))


def refresh_partition_status(context: dg.OutputContext) -> None:
    """Bring the output's asset's partition status up to the events stored so far, when incsync's event log keeps
    it (``partition_status``): called once a model's run reported its windows, so the asset page reads only the
    events since the last run ended, not a day one's millions at its first view. A failure is logged: the page
    computes the same status itself."""
    from incsync.operations.dagster_compat.grid_subset import is_grid
    from incsync.operations.dagster_compat.partition_status import partition_status

    instance = context.step_context.instance
    partitions_def = context.asset_partitions_def if context.has_asset_partitions else None
    if not getattr(instance.event_log_storage, "compact_events", False) or not is_grid(partitions_def):
        return
    try:
        partition_status(instance, context.asset_key, partitions_def)
    except Exception as exc:  # noqa: BLE001 - the status is a cache; the run's outcome stands
        context.log.warning(f"incsync: the partition status of {context.asset_key.to_user_string()} was not refreshed "
                            f"({type(exc).__name__}: {exc}); the asset page computes it when asked")


def store_events_in_batches() -> None:
    """Let the instance store each batch of asset events at once, whatever its storage: called when a
    run starts (its IO manager's set-up), never when definitions load.

    Dagster buffers the events it is handed with batch metadata (``report_planned``,
    ``report_materialized``, the output's materializations at a step's end) only while
    ``DAGSTER_EVENT_BATCH_SIZE`` is set, which it reads from the environment; then dagster-postgres
    inserts a batch of materializations in one statement, and incsync's SQLite event log
    (``BatchingSqliteEventLogStorage``, which sets it when the instance loads) a batch of asset events
    in two transactions. Without it every event is its own round trip. A value already in the
    environment is left as it is."""
    os.environ.setdefault(EVENT_BATCH_ENV_VAR, str(EVENT_BATCH_SIZE))


def instance_postgres_url(instance: dg.DagsterInstance) -> str | None:
    """The database URL of a PostgreSQL-backed instance (dagster-postgres's storages keep it as
    ``postgres_url``, resolved from the environment), else None."""
    for storage in (instance.run_storage, instance.event_log_storage):
        url = getattr(storage, "postgres_url", None)
        if isinstance(url, str):
            return url
    return None


def read_instance_value(instance: dg.DagsterInstance, key: str) -> str | None:
    """A value incsync keeps in the instance's key-value table (the run storage's ``get_cursor_values``,
    where Dagster's daemons keep theirs): state too large for a sensor cursor, which every tick row copies."""
    return instance.run_storage.get_cursor_values({key}).get(key)


def write_instance_value(instance: dg.DagsterInstance, key: str, value: str) -> None:
    """Set ``key`` in the instance's key-value table (``set_cursor_values``: insert, else update)."""
    instance.run_storage.set_cursor_values({key: value})


def __getattr__(name: str) -> Any:
    # ``module: incsync.operations.dagster_compat, class: BatchingSqliteEventLogStorage`` in dagster.yaml
    if name == "BatchingSqliteEventLogStorage":
        from incsync.operations.dagster_compat.sqlite import _batching_sqlite_event_log_storage

        cls = _batching_sqlite_event_log_storage()
    elif name == "CompactPostgresEventLogStorage":
        from incsync.operations.dagster_compat.postgres import _compact_postgres_event_log_storage

        cls = _compact_postgres_event_log_storage()
    elif name == "PooledPostgresRunStorage":
        from incsync.operations.dagster_compat.postgres import _pooled_postgres_run_storage

        cls = _pooled_postgres_run_storage()
    else:
        raise AttributeError(name)
    globals()[name] = cls
    return cls

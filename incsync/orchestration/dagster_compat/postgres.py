"""dagster-postgres' event log storing a batch in one statement where its own code does not. Private
Dagster API, pinned by ``incsync_tests/orchestration/test_event_batches.py``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import dagster as dg


def is_postgres_event_log(storage: Any) -> bool:
    """Whether ``storage`` is dagster-postgres' event log (False when dagster-postgres is not installed)."""
    try:
        from dagster_postgres.event_log.event_log import PostgresEventLogStorage
    except ImportError:
        return False
    return isinstance(storage, PostgresEventLogStorage)


def store_planned_on_postgres(instance: dg.DagsterInstance, run_id: str, events: Sequence[Any]) -> bool:
    """Store planned events as one batch on dagster-postgres' event log, the way it stores a batch of
    materializations (``PostgresEventLogStorage.store_event_batch``): one multi-row insert, the
    partitions' tags, the asset's row from the last event. Its own ``store_event_batch`` stores planned
    events one at a time, each on a new connection (25-29 ms apiece, benchmark of November 2026), so a
    slow span of 695 windows cost 17 s. False when the storage is not dagster-postgres'."""
    storage = instance.event_log_storage
    if not is_postgres_event_log(storage):
        return False
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
    from dagster._time import get_current_timestamp

    now = get_current_timestamp()
    entries = [
        EventLogEntry(user_message="", level=logging.INFO, job_name=e.job_name, run_id=run_id, error_info=None,
                      timestamp=now, step_key=e.step_key, dagster_event=e)
        for e in events
    ]
    statement = storage.prepare_insert_event_batch(entries).returning(SqlEventLogStorageTable.c.id)
    with storage._connect() as conn:  # noqa: SLF001 - see the docstring
        ids = [int(row[0]) for row in conn.execute(statement).fetchall()]
    with storage.index_transaction() as conn:
        storage._store_asset_event_tags(conn, entries, ids)  # noqa: SLF001
        storage._store_asset_event(conn, entries[-1], ids[-1])  # noqa: SLF001
    return True


def store_rows_on_postgres(storage: Any, rows: list[dict[str, Any]], last: Any) -> None:
    """Rows of one asset's materializations without tags (``dagster_compat.events``), stored as
    dagster-postgres stores a batch of materializations: one multi-row insert, then the asset's row
    from the last event (``last``, its ``EventLogEntry``)."""
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable

    table = SqlEventLogStorageTable
    with storage._connect() as conn:  # noqa: SLF001 - see the module's docstring
        ids = [int(row_id) for (row_id,) in conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)]
    with storage.index_transaction() as conn:
        storage._store_asset_event(conn, last, ids[-1])  # noqa: SLF001

"""dagster-postgres' event log storing a batch in one statement where its own code does not. Private
Dagster API, pinned by ``incsync_tests/operations/test_event_batches.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
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
    events one at a time, each on a new connection, so a slow span of many windows would spend longer
    storing its plan than moving its rows. False when the storage is not dagster-postgres'."""
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
        storage._store_asset_event_tags(conn, entries, ids)  # noqa: SLF001 - see the module's docstring
        storage._store_asset_event(conn, entries[-1], ids[-1])  # noqa: SLF001 - see the module's docstring
    return True


# Whether a server compresses large values with lz4 (PostgreSQL >= 14 built with it), by storage URL.
_LZ4: dict[str, bool] = {}
# Inserts of one report running at once, each on its own connection: the server's side of an insert
# (the row, its TOAST value, event_logs' indexes) is most of its cost, so two overlap well; a third
# gains nothing more (benchmarks/HISTORY.md has the runs).
PARALLEL_INSERTS = 2
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def store_rows_on_postgres(storage: Any, batches: Iterable[tuple[list[dict[str, Any]], Any]]) -> None:
    """Batches of rows of one asset's materializations without tags (``dagster_compat.events``, each
    with its last row's ``EventLogEntry``), stored as dagster-postgres stores a batch of
    materializations: a multi-row insert, then the asset's row from the last event.

    Each batch but the last is inserted as soon as the next one is made, ``PARALLEL_INSERTS`` at a time
    (the server works while this thread serializes the next batch); the last one after them all, so
    its last row holds the report's highest id, and the asset's row is updated once, from it, as
    dagster-postgres does after a batch."""
    pending: list[Future[list[int]]] = []
    previous: tuple[list[dict[str, Any]], Any] | None = None
    try:
        for batch in batches:
            if previous is not None:
                pending.append(_pool().submit(_insert, storage, previous[0]))
            previous = batch
    finally:
        wait(pending)  # every insert started has ended before this returns or raises
    for future in pending:
        future.result()  # the first failed insert's error
    if previous is None:
        return
    rows, last = previous
    ids = _insert(storage, rows)
    with storage.index_transaction() as conn:
        storage._store_asset_event(conn, last, ids[-1])  # noqa: SLF001 - see the module's docstring


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(PARALLEL_INSERTS, thread_name_prefix="incsync-event-insert")
        return _POOL


def _insert(storage: Any, rows: list[dict[str, Any]]) -> list[int]:
    """One multi-row insert into ``event_logs``; the new rows' ids, in order.

    An event's JSON is past the size where PostgreSQL compresses a value (TOAST); its default method,
    pglz, is markedly slower than lz4 at storing a backfill's events, so where the server has lz4 this
    connection uses it (``default_toast_compression``, a session setting; the column and every reader
    are unchanged: each value records its own method)."""
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable

    table = SqlEventLogStorageTable
    with storage._connect() as conn:  # noqa: SLF001 - see the module's docstring
        lz4 = _LZ4.get(storage.postgres_url)
        if lz4 is None:
            lz4 = _LZ4[storage.postgres_url] = bool(conn.exec_driver_sql(
                "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings WHERE name = 'default_toast_compression'"
            ).scalar())
        if lz4:
            # this connection only (a session setting): on the connection kept between calls it only
            # chooses how later large values on it are compressed, which readers never need to know
            conn.exec_driver_sql("SET default_toast_compression = lz4")
        return [int(row_id) for (row_id,) in conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)]


# A storage of incsync's keeps one connection between its calls (the webserver's, ``optimize_for_webserver``,
# does too): dagster-postgres opens a new one for every call (NullPool: "to prevent accumulating connections
# per DagsterInstance"), ~3.5 ms each here against ~0.4 ms on a kept one, and a transfer's run makes dozens
# of calls (hundreds for a run of many recipients). incsync's processes hold one instance each (the CLI, a
# worker, a run's worker process), so each keeps at most one idle connection per storage; more at once
# (parallel inserts of a report, threads publishing) open as before, unbounded so none ever waits, and close
# on return. Checked before use (a restarted server is reconnected) and replaced after an hour.
KEPT_CONNECTIONS = {"pool_size": 1, "max_overflow": -1, "pool_recycle": 3600, "pool_pre_ping": True}


def keep_connection(storage: Any) -> None:
    """Give a dagster-postgres storage an engine that keeps one connection between calls (``KEPT_CONNECTIONS``),
    with the URL's ``options`` and the token provider dagster-postgres's own engine has."""
    from dagster_postgres.utils import create_pg_engine

    kwargs: dict[str, Any] = {"isolation_level": "AUTOCOMMIT", **KEPT_CONNECTIONS}
    options = storage._engine.url.query.get("options")  # noqa: SLF001 - see the module's docstring
    if options:
        kwargs["connect_args"] = {"options": options}
    previous = storage._engine  # noqa: SLF001 - see the module's docstring
    token_provider = storage._token_provider  # noqa: SLF001 - see the module's docstring
    storage._engine = create_pg_engine(storage.postgres_url, token_provider, **kwargs)  # noqa: SLF001 - likewise
    previous.dispose()  # a NullPool holds nothing; disposing it is for form


def _from_config_value(cls: type, inst_data: Any, config_value: Any) -> Any:
    """A dagster-postgres storage class's ``from_config_value``, for incsync's subclasses of them."""
    from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

    return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
               should_autocreate_tables=config_value.get("should_autocreate_tables", True),
               token_provider=get_token_provider_from_config(config_value))


def _pooled_postgres_run_storage() -> type:
    """Build the class lazily: dagster-postgres is an optional dependency."""
    from dagster_postgres.run_storage import PostgresRunStorage

    class PooledPostgresRunStorage(PostgresRunStorage):
        """dagster-postgres' run storage keeping one connection between calls (``keep_connection``): what
        ``incsync dagster-yaml`` names for a PostgreSQL-backed instance."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            keep_connection(self)

        from_config_value = classmethod(_from_config_value)

    PooledPostgresRunStorage.__module__ = "incsync.operations.dagster_compat"  # where dagster.yaml names it
    return PooledPostgresRunStorage


def _compact_postgres_event_log_storage() -> type:
    """Build the class lazily: dagster-postgres is an optional dependency."""
    from dagster_postgres.event_log.event_log import PostgresEventLogStorage

    from incsync.operations.dagster_compat.check_state import CheckStateAnswers
    from incsync.operations.dagster_compat.compact import install_reader
    from incsync.operations.dagster_compat.partition_status import PartitionStatusAnswers

    class CompactPostgresEventLogStorage(PartitionStatusAnswers, CheckStateAnswers, PostgresEventLogStorage):
        """dagster-postgres' event log whose materialization rows written by incsync are compact text
        (``compact``): what ``incsync dagster-yaml`` names for a PostgreSQL-backed instance. An event of
        ~1.5 KB is below the size where PostgreSQL compresses a value, so each would be stored whole.
        It keeps one connection between calls (``keep_connection``)."""

        compact_events = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            install_reader()  # before any query: this instance's rows may hold compact text
            super().__init__(*args, **kwargs)
            keep_connection(self)

        from_config_value = classmethod(_from_config_value)

    CompactPostgresEventLogStorage.__module__ = "incsync.operations.dagster_compat"  # where dagster.yaml names it
    return CompactPostgresEventLogStorage


def postgres_storage_sections(postgres: Any) -> dict[str, Any]:
    """The ``run_storage``, ``event_log_storage`` and ``schedule_storage`` entries of a dagster.yaml for what a
    ``storage: postgres:`` block configures (``postgres``, the block's settings), with incsync's compact event
    log (``CompactPostgresEventLogStorage``) and run storage keeping a connection (``PooledPostgresRunStorage``)
    instead of dagster-postgres' own."""
    return {
        "run_storage": {"module": "incsync.operations.dagster_compat", "class": "PooledPostgresRunStorage",
                        "config": postgres},
        "event_log_storage": {"module": "incsync.operations.dagster_compat", "class": "CompactPostgresEventLogStorage",
                              "config": postgres},
        "schedule_storage": {"module": "dagster_postgres.schedule_storage", "class": "PostgresScheduleStorage",
                             "config": postgres},
    }


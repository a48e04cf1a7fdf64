"""Dagster's SQLite event log made fit for thousands of partitions: no fsync per event (on its own
connections, as the instance's dagster.yaml says), a batch of asset events in two transactions, run
shards copied from a template. Private Dagster API, pinned by ``incsync_tests/operations/test_dagster_compat.py``."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from incsync.errors import ConfigError
from incsync.operations.dagster_compat.compact import install_reader

EVENT_BATCH_ENV_VAR = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = 10_000


SYNCHRONOUS_MODES = ("off", "normal", "full")
DEFAULT_SYNCHRONOUS = "off"
# An environment variable that chose the mode once: refused when set, so its value is never silently ignored.
_OLD_SYNC_ENV_VAR = "INCSYNC_SQLITE_SYNC"


def synchronous_mode(value: object) -> str:
    """The event log's ``synchronous`` setting as SQLite names it. YAML reads a bare ``off`` as false."""
    mode = "off" if value is False else str(value).lower()
    if mode not in SYNCHRONOUS_MODES:
        raise ConfigError("dagster.yaml", [
            f'event_log_storage.config.synchronous: "{value}" must be one of {", ".join(SYNCHRONOUS_MODES)}'])
    return mode


def _batching_sqlite_event_log_storage() -> type:
    """Build the storage class lazily: importing Dagster's SQLite storage is slow, and few processes need it."""
    from dagster._core.events import ASSET_EVENTS
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from incsync.operations.dagster_compat.check_state import CheckStateAnswers
    from incsync.operations.dagster_compat.partition_status import PartitionStatusAnswers

    class BatchingSqliteEventLogStorage(PartitionStatusAnswers, CheckStateAnswers, SqliteEventLogStorage):
        """Dagster's SQLite event log, storing a batch of asset events in two transactions, each commit
        without an fsync unless the instance asks for one.

        A run over a year of daily windows records ~2 asset events per window partition (planned at
        launch, materialized at the end). Dagster hands them over as batches when
        ``DAGSTER_EVENT_BATCH_SIZE`` is set (``EventLogStorage.store_event_batch``), but its SQLite
        storage stores a batch one event at a time: a new engine and two transactions per event, and a
        schema inspection per asset-key update, which costs more than most windows' transfer. This stores
        the batch's rows in one transaction on the run's shard and one on the index shard, with the same
        rows, tags and asset-key entries as one event at a time (the asset-key row is written for the
        last event of each kind per asset: later ones overwrite earlier ones column by column). Anything
        that is not an asset event goes the stock way.

        ``synchronous`` (dagster.yaml, default ``off``): Dagster opens, commits and closes a connection per
        event, and with SQLite's default (``full``) each commit waits for the disk, so a run of many windows
        would spend most of its time in fsync. With ``off`` an application crash loses nothing; an
        operating-system crash or power loss may lose or damage the newest part of the run history.
        incsync's own state (HW, transfer records) lives in each destination, committed with the data,
        and never depends on Dagster's event log. Only this storage's connections are set.
        """

        def __init__(self, base_dir: str, inst_data: Any = None, synchronous: object = DEFAULT_SYNCHRONOUS) -> None:
            if os.environ.get(_OLD_SYNC_ENV_VAR):
                raise ConfigError("environment", [
                    f"{_OLD_SYNC_ENV_VAR}: the event log's fsync mode is the instance's setting now; unset it and write "
                    f"`synchronous: {os.environ[_OLD_SYNC_ENV_VAR]}` under event_log_storage.config in dagster.yaml"])
            self._synchronous = synchronous_mode(synchronous)
            install_reader()  # before any query: this instance's rows may hold compact text
            # The instance stores a batch of asset events at once only while this is set (Dagster reads it
            # from the environment): the instance that names this storage asks for batches.
            os.environ.setdefault(EVENT_BATCH_ENV_VAR, str(EVENT_BATCH_SIZE))
            self._template: str | None = None
            self._kept_index: Any = None  # the index shard's connection kept for batches (``_kept_index_transaction``)
            super().__init__(base_dir, inst_data=inst_data)

        @classmethod
        def config_type(cls) -> Any:
            from dagster import Any as AnyValue
            from dagster import Field, StringSource

            return {"base_dir": StringSource,
                    "synchronous": Field(AnyValue, is_required=False, default_value=DEFAULT_SYNCHRONOUS,
                                         description="SQLite's PRAGMA synchronous for the event log: off, normal or full.")}

        @contextmanager
        def _connect(self, shard: str) -> Iterator[Any]:
            """Dagster's connection to a shard, committing as ``synchronous`` says (a connection's own setting)."""
            with super()._connect(shard) as conn:
                if self._synchronous != "full":
                    conn.exec_driver_sql(f"PRAGMA synchronous={self._synchronous.upper()}")
                yield conn

        @contextmanager
        def _kept_index_transaction(self) -> Iterator[Any]:
            """A transaction on the index shard over one connection this storage keeps open, for the run's batches
            of materializations: Dagster opens and closes a connection per use, and SQLite copies the whole WAL
            into the database (a checkpoint) whenever the last connection to it closes, ~8 % of a day-one run's
            time. While one stays open the WAL is checkpointed a few pages at a time, as SQLite does by itself
            every 1,000 pages. Every connection of the storage is taken under its lock, so one is never shared
            by two threads at once."""
            from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
            from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
            from sqlalchemy import create_engine
            from sqlalchemy.pool import StaticPool

            with self._db_lock:
                if self._kept_index is None:
                    if INDEX_SHARD_NAME not in self._initialized_dbs:  # as Dagster's _connect: created on first use
                        with super()._connect(INDEX_SHARD_NAME):
                            pass
                    self._kept_index = create_engine(
                        self.conn_string_for_shard(INDEX_SHARD_NAME), poolclass=StaticPool,
                        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
                    if self._synchronous != "full":
                        with self._kept_index.connect() as conn:
                            conn.exec_driver_sql(f"PRAGMA synchronous={self._synchronous.upper()}")
                with self._kept_index.connect() as conn, conn.begin():
                    yield conn

        def dispose(self) -> None:
            with self._db_lock:
                if self._kept_index is not None:
                    self._kept_index.dispose()
                    self._kept_index = None
            super().dispose()

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
            last: dict[tuple[str, str], int] = {}
            for i, event in enumerate(events):
                last[(event.dagster_event.asset_key.to_string(), event.dagster_event_type)] = i
            self._store_rows([self._event_to_row(event) for event in events], events, sorted(last.values()))

        # Materialization rows are stored as compact text (``compact``) and in the index shard only.
        compact_events = True

        def store_materialization_rows(self, rows: list[dict[str, Any]], last: Any) -> None:
            """Rows of one asset's materializations without tags (``dagster_compat.events``), ``last`` the
            last row's event: stored in the index shard, where the asset's pages, partition status,
            sensors and backfills read them, not again in the run's shard. The run's page lists each commit
            (one log line) instead of each window; the windows are on the asset's page
            (docs/design.md#bookkeeping). Storing every event twice, as Dagster does, doubled the
            instance's size for a backfill of many recipients."""
            self._store_rows(rows, [], [], last=last, run_shards=False)

        def _store_rows(self, rows: list[dict[str, Any]], events: list[Any], updates: list[int], last: Any = None,
                        run_shards: bool = True) -> None:
            by_run: dict[str, list[dict[str, Any]]] = {}
            for row in rows if run_shards else ():
                by_run.setdefault(row["run_id"], []).append(row)
            for run_id, run_rows in by_run.items():
                with self.run_connection(run_id) as conn:
                    _insert_rows(conn, run_rows)
            with self._kept_index_transaction() as conn:
                ids = _insert_rows(conn, rows)
                if events:
                    self._store_asset_event_tags(conn, events, ids)
                for i in updates:
                    self._store_asset_event(conn, events[i], ids[i])
                if last is not None:
                    self._store_asset_event(conn, last, ids[-1])

    def _insert_rows(conn: Any, rows: list[dict[str, Any]]) -> list[int]:
        """Insert ``rows`` into ``event_logs`` with one statement per ``_ROWS_PER_STATEMENT``; their ids.

        SQLAlchemy's executemany steps SQLite once per row, and each step gives up the GIL and waits to
        take it back: with the run's publish threads busy that wait is most of the insert, and one
        multi-row statement waits once. In the insert's transaction no other writer runs, so its rows
        take consecutive ids ending at the last one."""
        table = SqlEventLogStorageTable
        names = list(rows[0])
        bind = {name: table.c[name].type.bind_processor(conn.dialect) for name in names}
        into = f"INSERT INTO {table.name} ({', '.join(names)}) VALUES "
        one = "(" + ", ".join("?" * len(names)) + ")"
        ids: list[int] = []
        for at in range(0, len(rows), _ROWS_PER_STATEMENT):
            part = rows[at : at + _ROWS_PER_STATEMENT]
            params = []
            for row in part:
                for name in names:
                    value, process = row[name], bind[name]
                    params.append(process(value) if process is not None and value is not None else value)
            last = conn.exec_driver_sql(into + ", ".join([one] * len(part)), tuple(params)).lastrowid
            ids.extend(range(last - len(part) + 1, last + 1))
        return ids

    BatchingSqliteEventLogStorage.__module__ = "incsync.operations.dagster_compat"  # where dagster.yaml names it
    return BatchingSqliteEventLogStorage


_ROWS_PER_STATEMENT = 1000  # 7 parameters a row: within SQLite's 32,766


def event_log_storage_config(dagster_home: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``event_log_storage`` entry of a dagster.yaml for the instance in ``dagster_home``.

    The folder is Dagster's own (``history/runs`` under the instance), so an existing instance keeps
    its history; it is written out because the storage cannot know which instance loads it.
    """
    base_dir = os.path.join(os.path.abspath(dagster_home), "history", "runs", "")
    return {"module": "incsync.operations.dagster_compat", "class": "BatchingSqliteEventLogStorage", "config": {"base_dir": base_dir}}

"""PostgreSQL destinations on one server share a connection pool, and a settled schema is read in one
statement, without losing sight of what a recipient changed (issue 29). Real PostgreSQL throughout."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from incsync.config.load import load_config
from incsync.core.bounds import to_micros
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, DestinationState, TransferRecord
from incsync.destinations.postgres import pool as pg_pool
from incsync.destinations.registry import build_destination
from incsync.errors import LeaseError, PublishError
from incsync.staging.batch import StagedBatch
from incsync_tests.support.destinations import PG_DSN_ENV, destination_env


@pytest.fixture
def dsn(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with destination_env("postgres", monkeypatch):
        yield os.environ[PG_DSN_ENV]


class Fleet:
    """``n`` recipients, each with a PostgreSQL destination of its own schema, all on one database."""

    def __init__(self, root: Path, n: int):
        self.root = root
        doc = {
            "sources": [{"name": "lake", "vendor": "lake", "path": "./src", "format": "parquet"}],
            "destinations": [{"name": f"d{i:02d}", "kind": "postgres", "dsn_env": PG_DSN_ENV, "schema": f"r{i:02d}"}
                             for i in range(n)],
            "models": [{"model_name": "orders", "source": "lake", "source_table": "orders", "primary_key": ["id"],
                        "columns": ["id", "organization_id", "status", "updated_at"], "last_modified_column": "updated_at",
                        "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
                        "min_start_time_epoch": 1704067200}],
            "recipients": [{"id": f"r{i:02d}", "id_in_provider_system": f"org_{i}", "destination": f"d{i:02d}"}
                           for i in range(n)],
        }
        (root / "incsync.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        config = load_config(root / "incsync.yaml")
        self.model = config.model("orders")
        self.pairs = [(r, build_destination(config.destination(r.destination))) for r in config.recipients]

    def publish(self, index: int, minute: int, *, expected: DestinationState | None = None, kind: str = INCREMENTAL) -> None:
        recipient, destination = self.pairs[index]
        folder = self.root / f"stage_{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        when = datetime(2024, 1, 1, 1, minute, tzinfo=timezone.utc)
        table = pa.table({"id": pa.array([1, 2], pa.int64()), "organization_id": [recipient.id_in_provider_system] * 2,
                          "status": [f"m{minute}"] * 2, "updated_at": pa.array([when] * 2, pa.timestamp("us", tz="UTC"))})
        pq.write_table(table, folder / "part-0.parquet")
        batch = StagedBatch(path=folder, files=(folder / "part-0.parquet",), schema=table.schema, rows=2,
                            bytes=(folder / "part-0.parquet").stat().st_size)
        day = "2024-01-01T00:00:00+00:00"
        record = TransferRecord(
            transfer_id=f"t{minute}-{uuid.uuid4().hex[:6]}", model_name="orders", recipient_id=recipient.id,
            window_start=day, window_end="2024-01-02T00:00:00+00:00", lower_bound=day, upper_bound="2024-01-02T00:00:00+00:00",
            rows_transferred=2, delta_rows_transferred=2, high_watermark_micros=to_micros(when), transfer_type=kind,
            fingerprint="test", lookback_seconds=0, committed_at=datetime.now(timezone.utc).isoformat())
        if expected is None:
            expected = destination.read_state(model=self.model, recipient=recipient)
        destination.publish(model=self.model, recipient=recipient, batch=batch, record=record, expected=expected)

    def state(self, index: int) -> DestinationState:
        recipient, destination = self.pairs[index]
        return destination.read_state(model=self.model, recipient=recipient)


def _admin(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def _backend_pid(destination: Any) -> int:
    with destination.connect() as conn:
        return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_the_pool_outsizes_the_engines_threads() -> None:
    from incsync.transfer.execute import MAX_PARALLEL_PUBLISHES
    from incsync.transfer.reads import MAX_PARALLEL_STATE_READS

    assert pg_pool.MAX_CONNECTIONS >= max(MAX_PARALLEL_STATE_READS, MAX_PARALLEL_PUBLISHES)


def test_many_recipients_on_one_server_use_at_most_the_pool_size_connections(dsn: str, tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, 24)
    seen: set[tuple[int, object]] = set()
    most = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal most
        with _admin(dsn) as admin:
            while not done.is_set():
                rows = admin.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND application_name = %s", [pg_pool.APPLICATION_NAME]).fetchall()
                seen.update(rows)
                most = max(most, len(rows))
                time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(max_workers=16) as threads:  # wider than the pool: callers wait, none connects more
            list(threads.map(lambda i: fleet.publish(i, 1), range(24)))
            list(threads.map(lambda i: fleet.publish(i, 2), range(24)))
    finally:
        done.set()
        sampler.join()
    assert all(fleet.state(i).last_transfer is not None for i in range(24))
    assert 1 <= most <= pg_pool.MAX_CONNECTIONS
    assert 1 <= len(seen) <= pg_pool.MAX_CONNECTIONS, "96 state reads and publishes opened more sessions than the pool holds"
    assert pg_pool.pool_stats(dsn)["connections_num"] <= pg_pool.MAX_CONNECTIONS


def test_a_connection_comes_back_clean_after_an_error_a_time_zone_change_or_a_killed_backend(dsn: str, tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, 1)
    destination = fleet.pairs[0][1]
    pid = _backend_pid(destination)
    with pytest.raises(psycopg.errors.DivisionByZero), destination.connect() as conn:
        conn.execute("CREATE TABLE scratch (x int)")
        conn.execute("SELECT 1 / 0")
    with destination.connect() as conn:
        conn.execute("SET TIME ZONE 'Asia/Tokyo'")  # committed: the session keeps it
    with destination.connect() as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] == pid  # the same session, reused
        assert conn.execute("SHOW TimeZone").fetchone()[0] == "UTC"
        assert conn.autocommit is False
        assert conn.execute("SELECT to_regclass('scratch')").fetchone()[0] is None  # rolled back, not committed
    pool = pg_pool._server(dsn, None).pool
    conn = pool.getconn()
    conn.execute("CREATE TABLE probe (x int)")
    pool.putconn(conn)  # returned mid-transaction: rolled back, not committed by the next user
    with destination.connect() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT to_regclass('probe')").fetchone()[0] is None
    with _admin(dsn) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(200):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                break
            time.sleep(0.01)
    with destination.connect() as conn:  # the dead session is dropped, never handed out
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] != pid
    fleet.publish(0, 1)
    assert fleet.state(0).last_transfer is not None


def test_a_failed_publish_leaves_its_session_clean_for_the_next(dsn: str, tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, 1)
    fleet.publish(0, 1)
    stale = fleet.state(0)
    fleet.publish(0, 2)
    with pytest.raises(LeaseError):
        fleet.publish(0, 3, expected=stale)
    destination = fleet.pairs[0][1]
    with destination.connect() as conn:  # one connection in the pool: the session the publishes used
        assert conn.execute("SELECT to_regclass('pg_temp._incsync_stage')").fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND application_name = %s", [pg_pool.APPLICATION_NAME]).fetchone()[0] == 1
    fleet.publish(0, 4)
    assert fleet.state(0).last_transfer.transfer_id.startswith("t4-")


def test_a_table_dropped_or_altered_between_publishes_is_still_seen(dsn: str, tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, 1)
    fleet.publish(0, 1)
    fleet.publish(0, 2)  # the schema is settled: the next reads are single statements
    with _admin(dsn) as admin:
        admin.execute("ALTER TABLE r00.orders DROP COLUMN status")
    fleet.publish(0, 3)  # the column the source has is added back, not assumed
    with _admin(dsn) as admin:
        assert admin.execute("SELECT DISTINCT status FROM r00.orders").fetchall() == [("m3",)]
        admin.execute("DROP TABLE r00.orders")
    state = fleet.state(0)
    assert state.reset_reason and "table r00.orders was dropped while its transfer log records transfer t3-" in state.reset_reason
    fleet.publish(0, 4, expected=state, kind=FULL_REFRESH)
    with _admin(dsn) as admin:
        assert admin.execute("SELECT count(*) FROM r00.orders").fetchone()[0] == 2
    expected = fleet.state(0)
    with _admin(dsn) as admin:  # the log goes between the state read and the publish
        admin.execute("DROP TABLE r00._incsync_transfers")
    with pytest.raises(LeaseError):
        fleet.publish(0, 5, expected=expected)
    assert fleet.state(0).reset_reason == "destination_reset: table r00.orders holds rows but no transfer record of this recipient"


def test_a_settled_schema_is_read_in_one_statement_and_set_up_by_no_ddl(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet(tmp_path, 1)
    fleet.publish(0, 1)
    statements: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(self: psycopg.Cursor, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(query if isinstance(query, str) else query.as_string(self.connection))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    state = fleet.state(0)
    assert len(statements) == 1
    statements.clear()
    fleet.publish(0, 2, expected=state)
    assert not [s for s in statements if "CREATE SCHEMA" in s or "CREATE TABLE IF NOT EXISTS" in s or "to_regclass(%s)" in s]
    assert len(statements) <= 7, statements  # stage (2), lock (2), what is there, upsert, record


def test_all_connections_taken_fails_naming_the_destination(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = Fleet(tmp_path, 2)
    monkeypatch.setattr(pg_pool, "WAIT_SECONDS", 0.5)
    with contextlib.ExitStack() as held:
        for i in range(pg_pool.MAX_CONNECTIONS):
            held.enter_context(fleet.pairs[i % 2][1].connect())
        started = time.monotonic()
        with pytest.raises(PublishError, match=r"destination d01: no PostgreSQL connection to its server was free within 0.5 s"):
            fleet.state(1)
        assert time.monotonic() - started < 5
    assert fleet.state(1).last_transfer is None  # freed: served again


def test_a_refused_connection_fails_at_once_and_never_shows_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(PG_DSN_ENV, "postgresql://nobody:s3cret-pw@127.0.0.1:1/none")
    fleet = Fleet(tmp_path, 1)
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(PublishError, match=rf"destination d00: cannot connect to PostgreSQL with the DSN in \${PG_DSN_ENV}: ") as info:
        fleet.state(0)
    assert time.monotonic() - started < 5
    assert "s3cret-pw" not in str(info.value)
    assert "s3cret-pw" not in caplog.text
    pg_pool.close_pool(os.environ[PG_DSN_ENV])


def test_a_pool_in_a_forked_child_is_not_the_parents(dsn: str, tmp_path: Path) -> None:
    import gc

    fleet = Fleet(tmp_path, 1)
    destination = fleet.pairs[0][1]
    parent_pid = _backend_pid(destination)
    parent_server = pg_pool._server(dsn, None)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child; its verdict goes through the pipe
        verdict = "ok"
        try:
            if pg_pool._server(dsn, None) is parent_server:
                verdict = "the child got its parent's pool"
            elif _backend_pid(destination) == parent_pid:
                verdict = "the child used its parent's session"
            pg_pool._inherited.clear()
            gc.collect()  # the parent's pool and connections are collected here: they must not end its sessions
            pg_pool.close_pools()  # what the child's exit does: closes its own pool only
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            verdict = f"{type(exc).__name__}: {exc}"
        os.write(write, verdict.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        verdict = pipe.read()
    os.waitpid(child, 0)
    assert verdict == "ok"
    assert pg_pool._server(dsn, None) is parent_server
    assert _backend_pid(destination) == parent_pid  # the parent's session outlived the child

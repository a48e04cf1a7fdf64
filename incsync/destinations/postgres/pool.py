"""One connection pool per PostgreSQL server and process, shared by every destination on it.

A fan-out run publishes to hundreds of recipients, often schemas of one database; a connection per
state read and per publish cost more than the work. Destinations whose DSNs resolve to the same
string share one ``psycopg_pool.ConnectionPool``, kept in this module keyed by (process id, DSN). The
DSN is a secret: it is a key in memory, never a name, a log line or a message.

- **Size.** At most ``MAX_CONNECTIONS`` (8) per server and process: the widest parallel use one process
  makes of its destinations, a run's state reads (``transfer.reads.MAX_PARALLEL_STATE_READS``, 8
  threads) and then its publishes (``transfer.execute.MAX_PARALLEL_PUBLISHES``, 4 threads, each
  destination's further limited by its ``max_concurrent_transfers``); a test pins 8 against both, so
  no engine thread waits for a connection. Wider callers (``validate --connect``, 16 threads) wait for
  one. Across processes, a destination's ``max_concurrent_transfers`` bounds the runs that publish to
  it, so a server sees at most 8 connections per run that uses it. None are kept open while unused:
  the pool's ``min_size`` is 0 and an idle connection closes after ``MAX_IDLE_SECONDS``.
- **Clean connections.** A connection comes back with its transaction committed or rolled back
  (psycopg's connection context, then the pool rolls back whatever is left), and is checked when
  taken: idle, ``autocommit=False``, in time zone UTC (set when connecting, again if the server
  reports another), and alive: one whose backend was terminated or whose server stopped has
  something to read on its socket, is asked with an empty query, and is dropped and replaced,
  never handed out.
- **Errors.** A connection attempt that fails makes the waiting caller fail at once with today's
  message (``cannot connect to PostgreSQL with the DSN in $VAR: ...``, the password masked), not
  after the pool's timeout; a pool whose connections all stay in use fails after ``WAIT_SECONDS``
  with an error naming the destination.
- **Processes.** A pool is never used by another process: the key holds the pid, and a forked child
  forgets (without closing: the sockets are its parent's) the pools it inherited. Each process closes
  its own pools at exit.
"""

from __future__ import annotations

import atexit
import itertools
import os
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from incsync.errors import PublishError

MAX_CONNECTIONS = 8
WAIT_SECONDS = 60.0  # for a free connection, when all are in use
MAX_IDLE_SECONDS = 60.0
MAX_LIFETIME_SECONDS = 30 * 60.0
CONNECT_TIMEOUT_SECONDS = 10
APPLICATION_NAME = "incsync"  # unless the DSN names one: pg_stat_activity shows whose connections they are
_SLICES = (0.05, 0.2, 0.5)  # how long a caller waits before looking whether connecting failed


def masked(exc: BaseException, password: str | None) -> str:
    """The error's text on one line, the password (should the server or libpq quote it) replaced."""
    message = " ".join(str(exc).split())
    return message.replace(password, "***") if password else message


class Server:
    """The pool of one server (DSN) in this process, and how its last connection attempt went."""

    def __init__(self, dsn: str, password: str | None, number: int) -> None:
        self.failure: str | None = None  # the last attempt's error; None once one succeeds
        server = self

        class PooledConnection(psycopg.Connection):  # type: ignore[type-arg]  # psycopg's generic Connection, used with its default row type
            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: object) -> PooledConnection:  # type: ignore[override]  # a classmethod narrowing psycopg's connect to the pool's keyword arguments
                try:
                    conn = super().connect(conninfo, **kwargs)  # type: ignore[arg-type]  # psycopg's connect takes these keyword arguments
                except psycopg.Error as exc:
                    server.failure = masked(exc, password)
                    raise psycopg.OperationalError(server.failure) from None  # what the pool logs: no secret
                server.failure = None
                return conn  # type: ignore[return-value]  # the connection psycopg made is of this class

        self.pool: ConnectionPool = ConnectionPool(
            dsn,
            connection_class=PooledConnection,
            kwargs={"autocommit": False, "connect_timeout": CONNECT_TIMEOUT_SECONDS,
                    "fallback_application_name": APPLICATION_NAME},
            min_size=0,
            max_size=MAX_CONNECTIONS,
            open=True,
            configure=_configure,
            check=_check,
            name=f"incsync-pg-{number}",
            timeout=WAIT_SECONDS,
            max_idle=MAX_IDLE_SECONDS,
            max_lifetime=MAX_LIFETIME_SECONDS,
            reconnect_timeout=WAIT_SECONDS,
            num_workers=2,
        )


def _configure(conn: psycopg.Connection) -> None:
    conn.autocommit = True
    conn.execute("SET TIME ZONE 'UTC'")
    conn.autocommit = False


def _check(conn: psycopg.Connection) -> None:
    """Before a connection is handed out: idle, alive, in UTC, autocommit off; raises (and the pool drops
    it) otherwise.

    An idle session has nothing to say: a socket with something to read holds the goodbye of a backend
    that was terminated or of a server that stopped (or its end of file), so only then is it asked,
    with an empty query. Otherwise the check costs no round trip.
    """
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise psycopg.OperationalError(f"connection not idle ({conn.info.transaction_status.name})")
    conn.autocommit = False
    if select.select([conn.fileno()], [], [], 0)[0] or conn.info.parameter_status("TimeZone") != "UTC":
        conn.autocommit = True
        try:
            conn.execute("")  # raises on a connection the server closed
            if conn.info.parameter_status("TimeZone") != "UTC":  # reported by the server
                conn.execute("SET TIME ZONE 'UTC'")
        finally:
            with suppress(psycopg.Error):
                conn.autocommit = False


_servers: dict[tuple[int, str], Server] = {}
_inherited: list[Server] = []  # a forked child's copies of its parent's pools: kept, never used or closed
_lock = threading.Lock()
_numbers = itertools.count(1)


def _server(dsn: str, password: str | None) -> Server:
    key = (os.getpid(), dsn)
    with _lock:
        server = _servers.get(key)
        if server is None or server.pool.closed:
            server = _servers[key] = Server(dsn, password, next(_numbers))
        return server


@contextmanager
def connection(
    dsn: str, *, password: str | None, destination: str, dsn_from: str, autocommit: bool = False,
) -> Iterator[psycopg.Connection]:
    """A connection of the server's pool for the ``with`` block: committed at its end, rolled back on
    an error, then returned (``autocommit`` for the block only). ``dsn_from`` says where the DSN came from
    (``$VARIABLE`` or ``vault entry <name>``), for messages."""
    server = _server(dsn, password)
    conn = _take(server, destination=destination, dsn_from=dsn_from)
    try:
        conn.autocommit = autocommit
        with conn:  # commit, or roll back on an error; a pooled connection is not closed by it
            yield conn
    finally:
        with suppress(psycopg.Error):  # a broken one is dropped by the pool; the check sets it again anyway
            conn.autocommit = False
        server.pool.putconn(conn)


def _take(server: Server, *, destination: str, dsn_from: str) -> psycopg.Connection:
    deadline = time.monotonic() + WAIT_SECONDS
    for attempt in itertools.count():
        left = deadline - time.monotonic()
        try:
            return server.pool.getconn(timeout=max(0.01, min(_SLICES[min(attempt, len(_SLICES) - 1)], left)))
        except PoolTimeout:
            if server.failure is not None:
                raise PublishError(
                    f"destination {destination}: cannot connect to PostgreSQL with the DSN in {dsn_from}: {server.failure}"
                ) from None
            if time.monotonic() >= deadline:
                raise PublishError(
                    f"destination {destination}: no PostgreSQL connection to its server was free within "
                    f"{WAIT_SECONDS:g} s: all {MAX_CONNECTIONS} of this process's connections to it stayed in use "
                    "(a transaction waiting on a lock?); nothing was written"
                ) from None
    raise AssertionError("unreachable")


def pool_stats(dsn: str) -> dict[str, int]:
    """The pool's counters (psycopg_pool's ``get_stats``) for this process; empty without a pool."""
    server = _servers.get((os.getpid(), dsn))
    return server.pool.get_stats() if server else {}


def close_pool(dsn: str) -> None:
    """Close this process's pool of ``dsn`` (e.g. before its database is dropped); the next use opens another."""
    with _lock:
        server = _servers.pop((os.getpid(), dsn), None)
    if server is not None:
        server.pool.close(timeout=1.0)


def close_pools() -> None:
    """Close every pool this process opened (at exit)."""
    pid = os.getpid()
    with _lock:
        mine = [key for key in _servers if key[0] == pid]
        servers = [_servers.pop(key) for key in mine]
    for server in servers:
        server.pool.close(timeout=1.0)


def _forget_inherited() -> None:
    """In a forked child: the parent's pools hold the parent's sockets and threads that did not fork."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    for server in _servers.values():
        # Marked closed so nothing (their __del__ included) touches them; never closed for real: closing
        # would end the parent's sessions. psycopg does not end a connection from another process.
        server.pool._closed = True  # noqa: SLF001 - psycopg_pool has no public "forget"
        _inherited.append(server)
    _servers.clear()


os.register_at_fork(after_in_child=_forget_inherited)
atexit.register(close_pools)

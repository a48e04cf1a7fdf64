"""A resident worker: ``incsync worker`` keeps Python, Dagster's definitions and instance, and the
Spark session loaded; ``incsync transfer --worker SOCKET`` (or ``$INCSYNC_WORKER``) hands its
typed transfer command to it over a Unix socket and prints what it answers.

A fresh ``incsync transfer`` process spends longer importing Dagster, pyspark and delta-rs before its
first row than a small incremental spends moving data. Through a worker the client is a standard-library
process that starts at once, and the transfer is the same Dagster run, recorded in the same instance.

The protocol and the client are ``incsync.worker.client``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from incsync.paths import dagster_home
from incsync.worker.client import (
    PROTOCOL_VERSION,
    REQUEST_TIMEOUT_SECONDS,
    WORKER_ENV_VAR,
    check_socket_path,
)
from incsync.worker.command import Resident, TransferCommand, wire_problem
from incsync.worker.errors import WorkerError

if TYPE_CHECKING:
    import dagster as dg


class RunRequest(Protocol):
    """Runs one transfer command as `incsync transfer` would and returns its exit status: the CLI's
    ``run_transfer_request``, handed in by ``incsync worker``, so this module never imports the CLI."""

    def __call__(self, command: TransferCommand, *, config: str, resident: Resident) -> int: ...


log = logging.getLogger(__name__)


# --- server -------------------------------------------------------------------------------------------


class _Relay(io.TextIOBase):
    """A text stream whose writes become ``{name: text}`` lines on the client's connection.

    A client that went away (Ctrl-C) stops the relay, not the transfer.
    """

    def __init__(self, conn: socket.socket, name: str, *, tty: bool = False) -> None:
        self.conn, self.name, self.connected, self.tty = conn, name, True, tty
        self.columns: int | None = None  # the client's terminal width, for the progress line

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        """Whether the client's stream is a terminal: the progress line is drawn for it, as in the client."""
        return self.tty

    def write(self, text: str) -> int:
        if text and self.connected:
            try:
                self.conn.sendall(json.dumps({self.name: text}).encode() + b"\n")
            except OSError:
                self.connected = False
        return len(text)


class Worker:
    """Holds the definitions and the instance of one configuration file between requests."""

    def __init__(self, config_file: Path, *, run: RunRequest) -> None:
        self.config_file = config_file.resolve()
        self.run = run
        self.home = dagster_home(self.config_file).resolve()
        self._loaded: tuple[float, dg.Definitions] | None = None
        self._instance: dg.DagsterInstance | None = None

    def resident(self, file: Path) -> tuple[dg.Definitions, dg.DagsterInstance]:
        """Definitions (rebuilt when the file changes) and the one instance, for ``cli_transfer.cmd_transfer``."""
        from incsync.operations.instance import dagster_instance
        from incsync.orchestration.definitions import build_definitions

        assert file.resolve() == self.config_file
        mtime = self.config_file.stat().st_mtime
        if self._loaded is None or self._loaded[0] != mtime:
            self._loaded = (mtime, build_definitions(self.config_file))
        if self._instance is None:
            self._instance = dagster_instance(self.config_file)
        return self._loaded[1], self._instance

    def warm_up(self) -> None:
        """Start (or connect to) Spark now, and (local Spark) run the staging path once over generated rows
        (``rehearsal``), so the first transfer pays neither the JVM's start nor its cold first job."""
        from incsync.config.load import load_config
        from incsync.orchestration.resources import spark_resource
        from incsync.sources.jdbc.connect import driver_jars, driver_packages

        config = load_config(self.config_file)
        resource = spark_resource(config.spark, extra_jars=driver_jars(config.sources), packages=driver_packages(config.sources))
        spark = resource.spark_session
        spark.sql("SELECT 1").collect()  # the runs' getOrCreate() finds this session
        if "spark.remote" not in config.spark:  # a Connect server keeps its own JVM warm across workers
            from incsync.worker.rehearsal import rehearse

            rehearse(spark, config)

    def refusal(self, request: dict[str, Any]) -> str | None:
        if request.get("version") != PROTOCOL_VERSION:
            return f"the worker speaks protocol {PROTOCOL_VERSION}, the client {request.get('version')}; use one incsync install"
        if request.get("config") != str(self.config_file):
            return (f"this worker serves {self.config_file}, not {request.get('config')}; "
                    f"start a worker for that file or drop --worker")
        if request.get("dagster_home") != str(self.home):
            return (f"this worker records runs in the Dagster instance at {self.home}, the client expects "
                    f"{request.get('dagster_home')}; give both the same DAGSTER_HOME")
        return wire_problem(request.get("transfer"))

    def handle(self, conn: socket.socket) -> None:
        out, err = _Relay(conn, "out"), _Relay(conn, "err")
        conn.settimeout(REQUEST_TIMEOUT_SECONDS)  # a client that connects and says nothing does not hold the worker
        try:
            request = json.loads(conn.makefile("r", encoding="utf-8").readline() or "null")
        except (ValueError, OSError):
            return
        conn.settimeout(None)
        if not isinstance(request, dict):
            return
        err.tty = request.get("stderr_tty") is True
        columns = request.get("stderr_columns")
        err.columns = columns if isinstance(columns, int) and not isinstance(columns, bool) and columns > 0 else None
        problem = self.refusal(request)
        if problem:
            err.write(f"error: {problem}\n")
            code = 2
        else:
            command = TransferCommand.from_wire(request["transfer"])
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = self.run(command, config=str(self.config_file), resident=self.resident)
            except Exception as exc:
                log.exception("incsync worker: request %s failed", command)  # to the worker's own stderr
                err.write(f"error: the worker failed on this request ({type(exc).__name__}: {exc}); its log has the traceback\n")
                code = 1
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
        release_memory()


def release_memory() -> None:
    """Hand memory freed by the last transfer back to the OS, so one large batch does not stay resident
    in a process that lives on (Arrow's pool and glibc's heap both keep freed pages by default)."""
    import ctypes
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def serve(
    config_file: Path, socket_path: Path, *, run: RunRequest, warm: bool = True, announce: Callable[[str], None] = print
) -> None:
    """Answer ``transfer`` requests on ``socket_path`` with ``run`` until SIGTERM or Ctrl-C; the socket is removed on exit."""
    from incsync.config.load import load_config

    load_config(config_file)  # a broken file fails here, not on the first request
    check_socket_path(socket_path)
    os.environ.pop(WORKER_ENV_VAR, None)  # the worker runs transfers itself
    if socket_path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(socket_path))
        except OSError:
            socket_path.unlink()  # left by a worker that died
        else:
            raise WorkerError(f"another incsync worker already answers at {socket_path}; stop it or pass another --socket")
        finally:
            probe.close()
    worker = Worker(config_file, run=run)
    worker.resident(worker.config_file)
    if warm:
        worker.warm_up()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        server.bind(str(socket_path))
    finally:
        os.umask(old_umask)
    server.listen(64)
    # accept() wakes twice a second to look at the flag; the OS may deliver a signal to any thread.
    server.settimeout(0.5)
    stopping = threading.Event()
    announce(f"incsync worker ready for {worker.config_file}\n  export {WORKER_ENV_VAR}={socket_path}")
    try:
        while not stopping.is_set():
            # Between requests SIGTERM and Ctrl-C stop the worker. A Dagster run installs its own handlers
            # (an interrupt then stops that run, as in any Dagster process) and leaves them changed, so
            # ours go back in place before every wait.
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stopping.set())
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                worker.handle(conn)
    finally:
        server.close()
        socket_path.unlink(missing_ok=True)
        _close_spark_client()


def _close_spark_client() -> None:
    """Close a Spark Connect client without its exit-time RPCs (pyspark's atexit cleanup), which can hold
    the process on a busy or stopped server. The server runs on for others; a local session ends with us."""
    if "pyspark.sql.connect.session" not in sys.modules:
        return
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession._get_default_session()  # noqa: SLF001 - pyspark keeps no public handle on it
    if session is not None:
        with contextlib.suppress(Exception):
            session.client.close()


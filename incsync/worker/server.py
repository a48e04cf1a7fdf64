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
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any, Protocol

from incsync.paths import dagster_home
from incsync.worker.client import PROTOCOL_VERSION, WORKER_ENV_VAR, check_socket_path
from incsync.worker.command import Resident, TransferCommand, wire_problem
from incsync.worker.errors import WorkerError
from incsync.worker.relay import Relay, read_request, release_memory

if TYPE_CHECKING:
    import dagster as dg


class RunRequest(Protocol):
    """Runs one transfer command as `incsync transfer` would and returns its exit status: the CLI's
    ``run_transfer_request``, handed in by ``incsync worker``, so this module never imports the CLI."""

    def __call__(self, command: TransferCommand, *, config: str, resident: Resident) -> int: ...


log = logging.getLogger(__name__)


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

    def handle(self, conn: socket.socket, request: dict[str, Any] | None = None) -> None:
        """Run one transfer request (read from ``conn`` when not given) and send its output and exit status."""
        if request is None:
            request = read_request(conn)
            if request is None:
                return
        out, err = Relay(conn, "out"), Relay(conn, "err")
        err.tty = request.get("stderr_tty") is True
        columns = request.get("stderr_columns")
        err.columns = columns if isinstance(columns, int) and not isinstance(columns, bool) and columns > 0 else None
        problem = self.refusal(request)
        if problem:
            err.write(f"error: {problem}\n")
            code = 2
        else:
            command = TransferCommand.from_wire(request["transfer"])
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"started": os.getpid()}).encode() + b"\n")
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


def serve(
    config_file: Path, socket_path: Path, *, run: RunRequest, warm: bool = True, announce: Callable[[str], None] = print,
    idle_exit_seconds: float | None = None,
) -> None:
    """Answer ``transfer`` requests on ``socket_path`` with ``run`` until SIGTERM, Ctrl-C, a ``stop`` request or
    ``idle_exit_seconds`` without a request; the socket is removed on exit.

    A thread accepts connections and reads each request as it comes, answering ``ping`` and ``stop`` at once, also
    while a transfer runs (so a client can tell a busy worker from a hung one); transfers run one at a time in
    the main thread, in the order they came (Dagster's in-process runs want the main thread's signal handlers)."""
    from incsync.config.load import load_config
    from incsync.worker.identity import code_digest, file_digest, version

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
    identity: dict[str, Any] = {
        "pid": os.getpid(), "version": version(), "code": code_digest(), "config": str(worker.config_file),
        "config_digest": file_digest(worker.config_file), "dagster_home": str(worker.home),
        "idle_exit_seconds": idle_exit_seconds,
    }
    worker.resident(worker.config_file)
    if warm:
        worker.warm_up()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        server.bind(str(socket_path))
    finally:
        os.umask(old_umask)
    mine = socket_path.stat().st_ino  # removed on exit only while it is still ours, not a successor's
    server.listen(64)
    server.settimeout(0.5)  # accept() wakes twice a second to look at the flag
    stopping = threading.Event()
    queue: Queue[tuple[socket.socket, dict[str, Any]]] = Queue()
    state = {"busy": False, "greeting": 0}
    lock = threading.Lock()

    def close_listener() -> None:
        with lock:
            if server.fileno() != -1:
                server.close()
                _unlink_if(socket_path, mine)

    def greet(conn: socket.socket) -> None:
        try:
            request = read_request(conn)
            if request is not None and request.get("ping") is True:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"pong": {**identity, "busy": state["busy"]}}).encode() + b"\n")
            elif request is not None and request.get("stop") is True:
                log.info("incsync worker: asked to stop; finishing what it was handed")
                stopping.set()
                close_listener()  # a successor may bind the path at once
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"stopping": os.getpid()}).encode() + b"\n")
            elif request is not None:
                queue.put((conn, request))
                return  # the main thread answers and closes it
            conn.close()
        finally:
            with lock:
                state["greeting"] -= 1

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by a stop request
                break
            with lock:
                state["greeting"] += 1
            threading.Thread(target=greet, args=(conn,), name="incsync-worker-greet", daemon=True).start()
        close_listener()

    acceptor = threading.Thread(target=accept, name="incsync-worker-accept", daemon=True)
    acceptor.start()
    announce(f"incsync worker ready for {worker.config_file}\n  export {WORKER_ENV_VAR}={socket_path}")
    idle_since = time.monotonic()
    try:
        while True:
            # Between requests SIGTERM and Ctrl-C stop the worker. A Dagster run installs its own handlers
            # (an interrupt then stops that run, as in any Dagster process) and leaves them changed, so
            # ours go back in place before every wait.
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stopping.set())
            try:
                conn, request = queue.get(timeout=0.5)
            except Empty:
                with lock:
                    quiet = state["greeting"] == 0 and queue.empty()
                if stopping.is_set() and quiet and not acceptor.is_alive():
                    break  # every request handed over before the stop has been answered
                if idle_exit_seconds is not None and quiet and time.monotonic() - idle_since > idle_exit_seconds:
                    log.info("incsync worker: no transfer for %.0f s; exiting", idle_exit_seconds)
                    stopping.set()
                continue
            state["busy"] = True
            try:
                with conn:
                    worker.handle(conn, request)
            finally:
                state["busy"] = False
                idle_since = time.monotonic()
    finally:
        stopping.set()
        close_listener()
        acceptor.join(timeout=5)
        _close_spark_client()


def _unlink_if(path: Path, inode: int) -> None:
    """Remove the socket at ``path`` if it is still the one this worker bound."""
    with contextlib.suppress(OSError):
        if path.stat().st_ino == inode:
            path.unlink()


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


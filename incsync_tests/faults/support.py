"""Fault injection helpers: kill a database connection while it does something, run one transfer."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync.sources.registry import build_source
from incsync.transfer.execute import run_transfer
from incsync.transfer.request import TransferOutcome, TransferRun


def transfer(config_path: Path, window: str, spark, *, staging_root: Path, scheduled: bool = False) -> TransferOutcome:
    """One window of ``orders`` for ``acme`` through the real source and destination of the file."""
    config = load_config(config_path)
    model, recipient = config.model("orders"), config.recipient("acme")
    request = TransferRun.for_model(
        config, model, source=build_source(config.source(model.source)), spark=lambda: spark, scheduled=scheduled,
    ).request(recipient, build_destination(config.destination(recipient.destination)), window)
    return run_transfer(request, staging_root=staging_root)


class Killer(threading.Thread):
    """Polls ``find`` (ids of the sessions to kill) and kills what it finds with ``kill``, ``times`` times at most."""

    def __init__(self, find: Callable[[], list[int]], kill: Callable[[int], None], *, times: int = 1, poll: float = 0.05):
        super().__init__(daemon=True)
        self.find, self.kill, self.times, self.poll = find, kill, times, poll
        self.killed: list[int] = []
        self.errors: list[BaseException] = []  # a failing probe is reported by the test, not lost with the thread
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and len(self.killed) < self.times:
            try:
                for session in self.find():
                    if session not in self.killed and len(self.killed) < self.times and self.kill(session) is not False:
                        self.killed.append(session)  # a session gone before the kill reached it is not counted
            except Exception as error:  # noqa: BLE001 - kept for the test's assertion
                self.errors.append(error)
            time.sleep(self.poll)

    def __enter__(self) -> Killer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join(timeout=10)


def pg_sessions(db, where: str) -> Callable[[], list[int]]:
    """Backends of ``db``'s database (other than the asker's) matching ``where`` on pg_stat_activity."""
    def find() -> list[int]:
        rows = db.execute(
            f"SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND ({where})"
        )
        return [r[0] for r in rows]
    return find


def pg_terminate(db) -> Callable[[int], None]:
    """Terminates a backend; False when it had already gone (pg_terminate_backend found no such process)."""
    return lambda pid: bool(db.execute("SELECT pg_terminate_backend(%s)", [pid])[0][0])


class PrivatePostgres:
    """A PostgreSQL server of the test's own (initdb in a temporary folder, a free port), which a test may
    stop and start: the shared server on 5432 serves other sessions and is never restarted."""

    def __init__(self, folder: Path, port: int):
        self.folder, self.port = folder, port
        self.data = folder / "data"
        self.prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # initdb refuses root

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, text=True, timeout=120)

    def init(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.prefix:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(shutil.which("initdb") or "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """The server's folder is under the system temp dir: the server's user must reach it (not pytest's 0700 tmp)."""
    import tempfile

    from incsync_tests.support.host import free_port, in_ci

    if shutil.which("initdb") is None or (os.geteuid() == 0 and shutil.which("runuser") is None):
        if in_ci():
            pytest.fail("initdb (and runuser, as root) are needed to run a private PostgreSQL server")
        pytest.skip("no initdb to run a private PostgreSQL server")
    folder = Path(tempfile.mkdtemp(prefix="incsync-pg-"))
    server = PrivatePostgres(folder, free_port())
    server.init()
    server.start()
    try:
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):
            server.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)

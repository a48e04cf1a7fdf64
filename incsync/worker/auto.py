"""The worker `incsync transfer` starts on first use, like a build tool's daemon (Gradle's, bazel's server):
the first call of a config pays the JVM's and Dagster's start once, in a detached ``incsync worker`` that
later calls hand their transfers to, until it has been idle ``worker.idle_exit_seconds`` (docs/config.md).

Standard library only (PyYAML when the file has a ``worker:`` section): this runs in the thin client.

Where: a folder of the user's own (``$XDG_RUNTIME_DIR/incsync``, else ``$XDG_CACHE_HOME/incsync/run`` or
``~/.cache/incsync/run``; mode 0700, refused when another user owns it or others may enter it) holds per worker
``<key>.sock``, ``.lock``, ``.pid`` and ``.log``. The key (``identity.worker_key``) digests what the worker must
share with its callers: the config file's absolute path, the Dagster home, the install (incsync's version,
the Python and its virtualenv, ``sys.prefix``, so ``python`` and ``python3`` of one venv share a worker; the
digest of incsync's own files: an upgraded install never talks to an old worker) and the environment apart
from shell and terminal variables (the secrets a config names by variable, the staging folder...). Callers
that differ in any of these get workers of their own.

Never trusted: under the key's lock a caller pings the worker (``client.ask``) and hands it the transfer only
when it answers within ``PING_TIMEOUT_SECONDS`` for the same install and the same config file content. A
socket nobody answers is removed (its worker died) and a new worker started; a worker for an older config
content is asked to stop (it removes its socket at once and finishes what it was handed) and replaced; one
that does not answer the ping is killed (after checking the pid is still that worker) and replaced. The
lock makes two first calls start one worker. When no worker can be started, or it does not get ready
within ``START_TIMEOUT_SECONDS``, the caller says so on stderr and runs the transfer itself; a connection
that ends before the worker said ``started`` ran nothing, and is retried once, then run here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from incsync.worker.client import ask, check_socket_path, exchange
from incsync.worker.command import TransferCommand
from incsync.worker.detached import STOP_TIMEOUT_SECONDS, alive, kill, log_tail, spawn
from incsync.worker.errors import NotStarted, WorkerError, WorkerUnavailable
from incsync.worker.identity import code_digest, file_digest, version, worker_key

AUTO_ENV_VAR = "INCSYNC_AUTO_WORKER"  # 0/false/no/off: run every transfer in the calling process
OFF = {"0", "false", "no", "off"}
PING_TIMEOUT_SECONDS = 10.0  # a busy worker answers from its accept thread in milliseconds; a loaded host may stall it
START_TIMEOUT_SECONDS = 180.0  # a cold JVM, Dagster's definitions and the warm-up, on a loaded 2-core host


def wanted(config_file: Path) -> bool:
    """Whether calls with ``config_file`` go to an automatic worker: not with ``INCSYNC_AUTO_WORKER=0`` nor
    ``worker: {auto_start: false}``. A file that cannot be read or parsed: no (the run here reports it)."""
    if os.environ.get(AUTO_ENV_VAR, "").strip().lower() in OFF:
        return False
    try:
        text = config_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if not re.search(r"^worker\s*:", text, re.MULTILINE):
        return True  # the default; a large file is not parsed here
    try:
        from incsync.config.yaml_load import load_yaml

        section = (load_yaml(text) or {}).get("worker")
    except Exception:  # noqa: BLE001 - a broken file is the run's to report
        return False
    if section is None:
        return True
    return isinstance(section, dict) and section.get("auto_start", True) is True


def run(command: TransferCommand, config_file: Path) -> int:
    """Hand ``command`` to this config's automatic worker, starting or replacing it as needed; its exit code.
    ``WorkerUnavailable`` (nothing ran) when none could be used."""
    config_file = config_file.resolve()
    for attempt in (1, 2):
        try:
            paths = Paths.of(config_file)
            with paths.locked():
                ensure(paths, config_file)
        except WorkerUnavailable:
            raise
        except (WorkerError, OSError) as exc:  # a socket path too long, no fork, a full disk: nothing ran yet
            raise WorkerUnavailable(f"no worker could be used ({exc})") from None
        try:
            code = exchange(paths.socket, command=command, config_file=config_file)
        except NotStarted as exc:  # it went between the ping and the request (idle exit, a stop): nothing ran
            if attempt == 2:
                raise WorkerUnavailable(f"the worker went away before the transfer began ({exc})") from None
            continue
        if code:  # as a failed run in this process points at its log of Dagster's and Spark's output
            print(f"Dagster's and Spark's output: {paths.log}", file=sys.stderr)
        return code
    raise AssertionError("unreachable")


class Paths:
    """One automatic worker's files in the runtime folder."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key = folder, key
        self.socket, self.lock = folder / f"{key}.sock", folder / f"{key}.lock"
        self.pid, self.log = folder / f"{key}.pid", folder / f"{key}.log"

    @classmethod
    def of(cls, config_file: Path) -> Paths:
        folder = runtime_dir()
        paths = cls(folder, worker_key(config_file))
        try:
            check_socket_path(paths.socket)
        except WorkerError:
            raise WorkerUnavailable(f"the worker socket path {paths.socket} is longer than a socket path may be; "
                                    "set XDG_RUNTIME_DIR to a shorter folder") from None
        return paths

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The key's lock: one caller at a time checks, starts or replaces its worker."""
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS + 2 * STOP_TIMEOUT_SECONDS
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise WorkerUnavailable(f"another incsync call has held {self.lock} too long") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # releases the lock


def runtime_dir() -> Path:
    """The user's folder for workers' sockets, locks and logs: created 0700; refused when not the user's own."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    folder = Path(base) / "incsync" if base else Path(cache) / "incsync" / "run"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as exc:
        raise WorkerUnavailable(f"cannot create the worker folder {folder} ({exc.strerror})") from None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise WorkerUnavailable(f"the worker folder {folder} must belong to you with mode 0700 (chmod 700 {folder})")
    return folder


def ensure(paths: Paths, config_file: Path) -> None:
    """Leave a worker answering at ``paths.socket`` for this install and this config's content (under the lock)."""
    answer = ask(paths.socket, "ping", timeout=PING_TIMEOUT_SECONDS) if paths.socket.exists() else None
    pong = answer.get("pong") if answer else None
    if isinstance(pong, dict):
        if current(pong, config_file):
            return
        why = f"worker {pong.get('pid')} serves another config content or install: asked to stop"
        _stop(paths, pong)  # it finishes what it has and exits
    elif paths.socket.exists() or _pid(paths) is not None:
        pid = _pid(paths)
        if pid is not None and not paths.socket.exists() and not alive(pid):
            why = f"worker {pid} exited"  # idle, or stopped
        else:
            why = (f"worker {pid} did not answer within {PING_TIMEOUT_SECONDS:.0f} s (dead or hung): "
                   "its socket removed, the process killed if it lived")
        _remove_dead(paths)  # replaced, not trusted
    else:
        why = "no worker"
    note(paths, f"starting a worker ({why})")
    start(paths, config_file)


def note(paths: Paths, text: str) -> None:
    """A line in the key's log (kept under 4 MB): why a worker was started or replaced."""
    with contextlib.suppress(OSError):
        if paths.log.exists() and paths.log.stat().st_size > 4 << 20:
            paths.log.unlink()
        with open(paths.log, "a", encoding="utf-8") as log:
            log.write(f"incsync transfer (pid {os.getpid()}) {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {text}\n")


def current(pong: dict[str, Any], config_file: Path) -> bool:
    """Whether the worker that answered serves this install and the config file as it is now."""
    try:
        digest = file_digest(config_file)
    except OSError:
        return False
    return (pong.get("code"), pong.get("version"), pong.get("config"), pong.get("config_digest")) == (
        code_digest(), version(), str(config_file), digest)


def start(paths: Paths, config_file: Path) -> None:
    """Start a detached worker for ``config_file`` and wait until it answers; ``WorkerUnavailable`` if it does not."""
    announce = _is_terminal(sys.stderr)
    if announce:
        print(f"incsync: starting a worker for {config_file} (once; later calls reuse it until it idles; "
              f"--no-worker runs here; log {paths.log}) ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    argv = [sys.executable, "-m", "incsync.cli.main", "worker", "-c", str(config_file), "--socket", str(paths.socket),
            "--auto"]
    try:
        pid = spawn(argv, paths.log)
    except WorkerError as exc:
        raise WorkerUnavailable(str(exc)) from None
    paths.pid.write_text(f"{pid}\n")
    deadline = started + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not alive(pid):
            paths.pid.unlink(missing_ok=True)
            raise WorkerUnavailable(f"the worker exited while starting: {log_tail(paths.log)} (log {paths.log})")
        if paths.socket.exists():
            answer = ask(paths.socket, "ping", timeout=PING_TIMEOUT_SECONDS)
            pong = answer.get("pong") if answer else None
            if isinstance(pong, dict) and pong.get("pid") == pid:
                if announce:
                    print(f"incsync: worker {pid} ready in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
                return
        time.sleep(0.1)
    kill(pid, socket=paths.socket)
    raise WorkerUnavailable(f"the worker did not get ready within {START_TIMEOUT_SECONDS:.0f} s (log {paths.log})")


def _stop(paths: Paths, pong: dict[str, Any]) -> None:
    """Ask a worker for an older config or install to stop, and wait until its socket is gone."""
    ask(paths.socket, "stop", timeout=PING_TIMEOUT_SECONDS)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while paths.socket.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if paths.socket.exists():
        pid = pong.get("pid")
        kill(pid if isinstance(pid, int) else None, socket=paths.socket)
    paths.pid.unlink(missing_ok=True)


def _remove_dead(paths: Paths) -> None:
    """Kill the worker the pid file names if it still lives (it did not answer), and remove its socket."""
    kill(_pid(paths), socket=paths.socket)
    paths.socket.unlink(missing_ok=True)
    paths.pid.unlink(missing_ok=True)


def _pid(paths: Paths) -> int | None:
    try:
        text = paths.pid.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

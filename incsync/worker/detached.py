"""Starting an automatic worker detached from its caller, and ending one that no longer answers.
Standard library only (``incsync.worker.auto`` runs in the thin client)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from incsync.worker.client import WORKER_ENV_VAR
from incsync.worker.errors import WorkerError

STOP_TIMEOUT_SECONDS = 10.0


def spawn(argv: list[str], log: Path) -> int:
    """``argv`` (``incsync worker --auto``) in a session of its own, detached from this process (a double fork: no
    zombie, no terminal); its pid. Its output goes to ``log``; ``WorkerError`` when it could not be started."""
    env = {k: v for k, v in os.environ.items() if k != WORKER_ENV_VAR}
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    read_end, write_end = os.pipe()
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - the forked child
            try:
                os.close(read_end)
                os.setsid()
                if os.fork():
                    os._exit(0)
                os.write(write_end, f"{os.getpid()}\n".encode())
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.closerange(3, write_end)
                os.closerange(write_end + 1, 65536)
                os.set_inheritable(write_end, False)  # closed by exec: the caller's read then ends
                os.execve(argv[0], argv, env)
            except BaseException as exc:  # noqa: BLE001 - whatever went wrong, to the caller, then out
                with contextlib.suppress(OSError):
                    os.write(write_end, f"!{exc}\n".encode())
            os._exit(127)
        os.close(write_end)
        os.waitpid(child, 0)
        said = b""
        while chunk := os.read(read_end, 4096):
            said += chunk
    finally:
        os.close(log_fd)
        os.close(read_end)
    lines = said.decode(errors="replace").splitlines()
    if not lines or not lines[0].isdigit():
        raise WorkerError("the worker could not be started" + (f" ({lines[0].lstrip('!')})" if lines else ""))
    if len(lines) > 1:
        raise WorkerError(f"the worker could not be started ({lines[1].lstrip('!')})")
    return int(lines[0])


def kill(pid: int | None, *, socket: Path) -> None:
    """SIGKILL ``pid`` if it is this key's worker (its command line names the socket): a recycled pid is left alone."""
    if pid is None or not alive(pid):
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if os.fsencode(str(socket)) not in cmdline:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (its parent has not reaped it yet) is dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def log_tail(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[-1][:300]

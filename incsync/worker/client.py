"""The worker's protocol and its client: ``incsync transfer --worker SOCKET`` (or ``$INCSYNC_WORKER``) hands
its request to a resident ``incsync worker`` (``incsync.worker.server``) and prints what it answers. Standard
library only, so the client starts at once.

Protocol (version 5): one JSON request line from the client, ``{"version", "config", "dagster_home",
"stderr_tty", "stderr_columns", "transfer": {"model", "recipients", "window", "backfill", "full_refresh",
"tags", "from", "to", "json", "verbose"}}`` (a ``command.TransferCommand``, each field checked), then JSON lines from
the worker: ``{"started": pid}`` as it begins the transfer (a connection that ends before it never ran one),
``{"out": text}``, ``{"err": text}``, and a last ``{"exit": code}``. ``{"version", "ping": true}`` is answered at
once, also while a transfer runs, with ``{"pong": identity}`` (``server.Worker.identity``: pid, incsync version,
code digest, config file and its digest, busy); ``{"version", "stop": true}`` with ``{"stopping": pid}``: the
worker removes its socket at once, finishes what it was handed and exits. When the client's standard
error is a terminal (``stderr_tty``, ``stderr_columns`` wide), the worker draws its progress line there as
it would on its own. The worker serves one request at a time (others wait
in the socket's backlog) and only the configuration file it was started with. The socket is created
mode 0600: only its owner can hand it work.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from incsync.paths import config_path, dagster_home
from incsync.worker.command import TransferCommand
from incsync.worker.errors import NotStarted, WorkerError

WORKER_ENV_VAR = "INCSYNC_WORKER"
PROTOCOL_VERSION = 5
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, with the terminating NUL
REQUEST_TIMEOUT_SECONDS = 10.0


def default_socket(config_file: Path) -> Path:
    return config_file.resolve().parent / ".incsync-worker.sock"


def check_socket_path(path: Path) -> None:
    if len(os.fsencode(str(path))) > MAX_SOCKET_PATH:
        raise WorkerError(f"worker socket path {path} is longer than {MAX_SOCKET_PATH} bytes; pass a shorter --socket")


def forward(socket_path: str | os.PathLike[str], *, command: TransferCommand, config: str | None) -> int:
    """Send ``command`` to the worker at ``socket_path``; relay its output; its exit code."""
    path = Path(socket_path)
    config_file = config_path(config).resolve()
    try:
        return exchange(path, command=command, config_file=config_file)
    except NotStarted as exc:
        if exc.args[0] != "unreachable":
            raise WorkerError(str(exc)) from None
        raise WorkerError(
            f"no incsync worker answers at {path}: start one with `incsync worker -c {config_file} --socket {path}`, "
            f"or run in this process by dropping --worker and unsetting {WORKER_ENV_VAR}"
        ) from None


def exchange(path: Path, *, command: TransferCommand, config_file: Path) -> int:
    """Hand ``command`` to the worker at ``path`` and relay its answer; its exit code. ``NotStarted`` when no
    worker answers there (``args[0] == "unreachable"``) or it hung up before beginning the transfer."""
    check_socket_path(path)
    request = {
        "version": PROTOCOL_VERSION,
        "transfer": command.wire(),
        "config": str(config_file),
        "dagster_home": str(dagster_home(config_file).resolve()),
        "stderr_tty": _is_terminal(sys.stderr),  # the worker then draws its progress line for this terminal
        "stderr_columns": _columns(sys.stderr),
    }
    started = False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode() + b"\n")
        except (FileNotFoundError, ConnectionRefusedError):
            raise NotStarted("unreachable") from None
        except OSError as exc:  # accepted, then dropped: a worker on its way out
            raise NotStarted(f"the incsync worker at {path} hung up before the transfer began ({exc})") from None
        try:
            for line in sock.makefile("r", encoding="utf-8"):
                message = json.loads(line)
                if "started" in message:
                    started = True
                elif "out" in message:
                    sys.stdout.write(message["out"])
                    sys.stdout.flush()
                elif "err" in message:
                    sys.stderr.write(message["err"])
                    sys.stderr.flush()
                elif "exit" in message:
                    return int(message["exit"])
        except KeyboardInterrupt:
            print(
                "\ninterrupted: the worker carries on with the transfer (a publish is atomic); "
                "`incsync transfers` shows how it ended",
                file=sys.stderr,
            )
            return 130
        except OSError as exc:
            if not started:
                raise NotStarted(f"the incsync worker at {path} hung up before the transfer began ({exc})") from None
    finally:
        sock.close()
    if not started:
        raise NotStarted(f"the incsync worker at {path} hung up before the transfer began")
    raise WorkerError(
        f"the incsync worker at {path} closed the connection before the transfer ended (it stopped or crashed); "
        "whatever it published is complete, see `incsync transfers`"
    )


def ask(path: Path, what: str, *, timeout: float) -> dict[str, Any] | None:
    """Send ``{"version", what: true}`` (``ping`` or ``stop``) to the worker at ``path``; its one-line answer, or
    None when nothing answers there within ``timeout`` seconds (no socket, a dead worker's socket, a hung one)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        sock.sendall(json.dumps({"version": PROTOCOL_VERSION, what: True}).encode() + b"\n")
        line = sock.makefile("r", encoding="utf-8").readline()
        answer = json.loads(line) if line else None
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    return answer if isinstance(answer, dict) else None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _columns(stream: Any) -> int | None:
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):
        return None

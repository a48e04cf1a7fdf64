"""The worker's side of a connection: the request line it reads and the streams that relay a transfer's output
to the client; and the memory a finished transfer hands back. See ``incsync.worker.client`` for the protocol."""

from __future__ import annotations

import contextlib
import io
import json
import socket
from typing import Any

from incsync.worker.client import REQUEST_TIMEOUT_SECONDS


class Relay(io.TextIOBase):
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


def read_request(conn: socket.socket) -> dict[str, Any] | None:
    """The request line a client sent on ``conn``; None for garbage, silence or a hang-up."""
    conn.settimeout(REQUEST_TIMEOUT_SECONDS)  # a client that connects and says nothing does not hold the worker
    try:
        request = json.loads(conn.makefile("r", encoding="utf-8").readline() or "null")
    except (ValueError, OSError):
        return None
    conn.settimeout(None)
    return request if isinstance(request, dict) else None


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

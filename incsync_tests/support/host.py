"""This machine as the tests see it: whether they run under CI, and a free loopback port."""

from __future__ import annotations

import os
import socket


def in_ci() -> bool:
    """Under CI=true a test that needs a missing service fails instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

"""What an automatic worker shares with its callers (``incsync.worker.auto``), digested: the install, the
config file's content, the environment. Standard library only."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from pathlib import Path

from incsync.paths import dagster_home

# Shell and terminal state that says nothing about a transfer: two shells of one user share a worker.
VOLATILE_ENV = re.compile(
    r"^(PWD|OLDPWD|SHLVL|_|TERM|TERM_.*|COLORTERM|COLUMNS|LINES|SSH_.*|DISPLAY|WINDOWID|WAYLAND_DISPLAY|TMUX|TMUX_.*|"
    r"STY|WINDOW|PS[1-4]|PROMPT_COMMAND|HIST.*|LS_COLORS|LSCOLORS|MAIL|MAILCHECK|LESS.*|PAGER|EDITOR|VISUAL|"
    r"XDG_SESSION_.*|XDG_VTNR|XDG_SEAT|DBUS_SESSION_BUS_ADDRESS|GPG_TTY|PYTEST_.*|COV_CORE_.*|INCSYNC_WORKER|"
    r"INCSYNC_AUTO_WORKER)$"
)


def worker_key(config_file: Path) -> str:
    """What a worker shares with its callers, digested (see the module's docstring)."""
    env = sorted((k, v) for k, v in os.environ.items() if not VOLATILE_ENV.match(k))
    parts = [str(config_file.resolve()), str(dagster_home(config_file).resolve()), version(), sys.prefix, sys.version,
             code_digest(), repr(env)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("incsync")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def code_digest() -> str:
    """The install's code: every file of the incsync package that is loaded from, by path, size and mtime."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(str(root).encode())
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".properties", ".json", ".yaml", ".jar")):
                info = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:24]

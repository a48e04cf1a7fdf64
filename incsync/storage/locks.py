"""Exclusive locks on local files, held for a block; the OS drops them when the process dies.

A lock file is removed by whoever holds it (a transfer on its way out, or the cleanup of a dead one), so a
lock is held only once the file locked is still the one at its path: a process that waited on a file
another one unlinked meanwhile locks the path's new file instead.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def _is_current(handle: IO[str], path: Path) -> bool:
    """Whether ``handle`` is still the file at ``path`` (not unlinked, nor replaced, since it was opened)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Wait for and hold the lock of ``path`` (created, with its folder, if missing) while the block runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a")  # noqa: SIM115 - held open as long as the lock is held
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if _is_current(handle, path):
                break
        except BaseException:
            handle.close()
            raise
        handle.close()  # its holder removed it while we waited: lock the file now at the path
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


@contextmanager
def lock_if_free(path: Path) -> Iterator[bool]:
    """Hold the lock of ``path`` while the block runs if no process holds it now (True), else do nothing (False).

    A missing file is created and locked: nobody holds it.
    """
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield _is_current(handle, path)  # another cleanup removed it just now: theirs to finish
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


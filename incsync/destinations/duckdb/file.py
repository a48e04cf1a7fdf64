"""Opening a DuckDB destination's file: its folder made, a path that cannot be the file named with its fix,
and the file's lock waited for while another process (a recipient's reader) holds it.

DuckDB locks a file per process: while a reader holds it open, even read-only, no other process may open it
to write. A reader that polls holds it for moments, so the open is tried again with backoff for up to
``lock_timeout_seconds``; nothing is written before the open succeeds, so a wait holds no partial state.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from pathlib import Path

import duckdb

from incsync.errors import PublishError

log = logging.getLogger(__name__)

FIRST_DELAY = 0.05
MAX_DELAY = 1.0

# One connection to a file at a time in this process: DuckDB's Python client, opening a file from two
# threads at once, can lose the table function that scans Arrow data ("python_arrow_scan does not exist").
_OPEN: dict[str, threading.Lock] = {}
_OPEN_GUARD = threading.Lock()


def file_lock(path: str) -> threading.Lock:
    with _OPEN_GUARD:
        return _OPEN.setdefault(os.path.realpath(path), threading.Lock())


def make_folder(path: str, *, destination: str) -> None:
    """Create the folder of the file ``path``; a file standing where it or a parent should be is named."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        existing = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), folder)
        blocker = existing if not existing.is_dir() else Path(exc.filename or folder)
        raise PublishError(
            f"destination {destination}: cannot create the DuckDB file {path}: {blocker} is a file, where a folder "
            "should be; the recipient moves that file away, or the provider sets the destination's `path` elsewhere"
        ) from exc


def connect(path: str, *, destination: str, lock_timeout: float) -> duckdb.DuckDBPyConnection:
    """A connection that may write ``path``, waiting up to ``lock_timeout`` seconds for another process's lock."""
    started = time.monotonic()
    delay = FIRST_DELAY
    while True:
        try:
            con = duckdb.connect(path)
        except duckdb.Error as exc:
            if not _locked(exc):
                raise _refused(path, destination, exc) from exc
            left = started + lock_timeout - time.monotonic()
            if left <= 0:
                raise PublishError(
                    f"destination {destination}: cannot open the DuckDB file {path} to write: another process held it "
                    f"open for the {lock_timeout:g} s this transfer waited (lock_timeout_seconds) ({exc}); readers "
                    "must close the file while transfers run (or read a copy), or raise the destination's "
                    "lock_timeout_seconds"
                ) from exc
            if delay == FIRST_DELAY:
                log.info("destination %s: another process holds %s open; waiting up to %g s for it", destination,
                         path, lock_timeout)
            # Jittered, so the tries do not fall into step with a reader that polls at a fixed period.
            time.sleep(min(left, random.uniform(delay / 2, delay)))
            delay = min(delay * 2, MAX_DELAY)
            continue
        if delay != FIRST_DELAY:
            log.info("destination %s: opened %s after waiting %.1f s for another process", destination, path,
                     time.monotonic() - started)
        return con


def _locked(exc: duckdb.Error) -> bool:
    text = str(exc).lower()
    return "could not set lock" in text or "conflicting lock" in text


def _refused(path: str, destination: str, exc: duckdb.Error) -> PublishError:
    if Path(path).is_dir():
        return PublishError(
            f"destination {destination}: the DuckDB file {path} is a folder; the recipient moves that folder away, "
            "or the provider sets the destination's `path` to a database file"
        )
    return PublishError(f"destination {destination}: cannot open the DuckDB file {path}: {exc}")

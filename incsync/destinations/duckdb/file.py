"""Opening a DuckDB destination's file: its folder made, and a path that cannot be the file named with its fix."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb

from incsync.errors import PublishError

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


def connect(path: str, *, destination: str) -> duckdb.DuckDBPyConnection:
    """A connection that may write ``path``."""
    try:
        return duckdb.connect(path)
    except duckdb.Error as exc:
        if _locked(exc):
            raise PublishError(
                f"destination {destination}: cannot open DuckDB file {path}: {exc}. Another process holds the file "
                "open: DuckDB lets one process open a file to write, so readers must close it (or read a copy) while "
                "transfers run.") from exc
        raise _refused(path, destination, exc) from exc


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

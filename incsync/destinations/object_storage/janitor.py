"""Removing what no manifest lists from an object-storage prefix: crashed transfers' files and temp files."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import pyarrow.fs as pafs

from incsync.config.destinations import DestinationConfig, ObjectStorageDestinationConfig
from incsync.destinations.object_storage.manifests import TransferLog, open_prefix
from incsync.storage.files import Store


def _is_data_key(key: str) -> bool:
    """``<model>/recipient=<id>/dt=<date>/<file>.parquet``."""
    parts = key.split("/")
    return len(parts) == 4 and parts[1].startswith("recipient=") and parts[2].startswith("dt=") and parts[3].endswith(".parquet")


def _is_stale_temp(key: str) -> bool:
    """A local temporary file (``.<name>.<id>.tmp``) under a ``_`` folder, left by a crash."""
    return key.startswith("_") and key.rsplit("/", 1)[-1].startswith(".") and key.endswith(".tmp")


def janitor(
    path: str | os.PathLike[str] | Store, *, grace_seconds: float = 6 * 3600, now: float | None = None,
    dry_run: bool = False, storage_options: Mapping[str, str] | None = None,
) -> list[Path] | list[str]:
    """Remove data files no manifest lists (and stale temp files) older than the grace period.

    The grace period must exceed the longest publish: a transfer's files land before its manifest.
    Returns what it removed: paths for a local folder, URLs for an object store.
    """
    store = open_prefix(path, storage_options)
    cutoff = (time.time() if now is None else now) - grace_seconds
    listed: set[str] = set()
    for private in (False, True):
        log = TransferLog(store, private=private)
        for model_dir in store.list(log.base):
            if model_dir.type == pafs.FileType.Directory:
                listed.update(f["data_file_key"] for m in log.all(model_dir.base_name)
                              for f in [*m["files"], *m.get("delete_files", [])])
    doomed = []
    for info in store.list(recursive=True):
        key = store.relative(info.path)
        if info.type != pafs.FileType.File or not (_is_data_key(key) or _is_stale_temp(key)) or key in listed:
            continue
        if info.mtime is not None and info.mtime.timestamp() < cutoff:
            doomed.append(key)
    if not dry_run:
        for key in doomed:
            store.delete(key)
    return sorted(Path(store.path(k)) for k in doomed) if store.local else sorted(store.uri(k) for k in doomed)


def janitored(destinations: list[DestinationConfig]) -> list[ObjectStorageDestinationConfig]:
    """The destinations the janitor passes over: object-storage prefixes (the files no manifest lists)."""
    return [d for d in destinations if isinstance(d, ObjectStorageDestinationConfig)]

"""The staging folder private to one transfer: locked while in use, removed on the way out or once abandoned."""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.core.transfer_id import TRANSFER_ID_PATTERN
from incsync.storage.locks import exclusive_lock, lock_if_free

if TYPE_CHECKING:  # an object store's folders (pyarrow's filesystems) only in the processes that stage there
    from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
    from incsync.storage.files import StoragePath

log = logging.getLogger(__name__)


def default_staging_dir(config: IncsyncConfig) -> str:
    """Where transfers (and the log's passes) stage: ``staging_dir``, else ``$INCSYNC_STAGING_DIR``, else a temp folder."""
    return config.staging_dir or os.environ.get("INCSYNC_STAGING_DIR") or str(Path(os.environ.get("TMPDIR", "/tmp")) / "incsync-staging")


def remove(path: Path | StoragePath) -> None:
    if not isinstance(path, Path):
        path.rmtree()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _lock_file(path: Path | StoragePath) -> Path:
    if not isinstance(path, Path):
        return path.lock_file()  # object stores have no locks: a file in this host's temporary folder
    return path.with_name(path.name + ".lock")  # beside the folder: Spark's overwrite empties the folder


@contextmanager
def claim(path: Path | StoragePath) -> Iterator[None]:
    """Hold ``<path>.lock`` while a transfer uses its staging folder; remove both on the way out.

    The OS drops the lock when the process dies, which is how ``remove_if_abandoned`` tells a dead
    transfer's folder from a live one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_file(path)
    with exclusive_lock(lock):
        try:
            yield
        finally:
            remove(path)
            lock.unlink(missing_ok=True)


def remove_if_abandoned(path: Path | StoragePath) -> bool:
    """Remove a staging folder and its lock file when no transfer holds the lock; False when one does.

    A folder on an object store is removed only by the host whose transfer made it (its lock file is
    local); other hosts' leftovers are for the bucket's lifecycle rules (docs/storage.md).
    """
    lock = _lock_file(path)
    if not isinstance(path, Path) and not lock.exists():
        return False
    with lock_if_free(lock) as free:
        if free:
            remove(path)
            lock.unlink(missing_ok=True)
    return free


def remove_abandoned(root: Path | StoragePath, names: re.Pattern[str]) -> list[Path | StoragePath]:
    """Remove what dead transfers left in ``root`` under ``names``: folders and lock files, found by either.

    A transfer locks ``<folder>.lock`` before it makes its folder and removes the folder before the lock,
    so a lock file alone is a transfer that died before it staged (or one about to stage: it holds its lock).
    """
    found: set[str] = set()
    if root.is_dir():
        for entry in root.iterdir():
            name = entry.name.removesuffix(".lock") if isinstance(entry, Path) else entry.name
            if names.fullmatch(name) and (entry.is_dir() or name != entry.name):
                found.add(name)
    if not isinstance(root, Path):  # their lock files are this host's: <name[:80]>-<digest of the URL>.lock
        from incsync.storage.files import locks_folder

        locks = locks_folder()
        for lock in sorted(locks.glob("*.lock")) if locks.is_dir() else []:
            name = lock.name[: -len("-0123456789abcdef01234567.lock")]
            if names.fullmatch(name) and (root / name).lock_file() == lock:
                found.add(name)
    removed = [root / name for name in sorted(found) if remove_if_abandoned(root / name)]
    for path in removed:
        log.warning("removed staging %s left by an interrupted transfer", path)
    return removed


def remove_stale_staging(staging_root: Path | StoragePath, model: ModelConfig, recipient: RecipientConfig) -> list[Path | StoragePath]:
    """Remove what dead transfers of (model, recipient), and dead fan-out reads of the model, left in staging.

    A live transfer holds its folder's lock (see ``claim``), so only abandoned ones go, lock files included.
    """
    names = rf"{re.escape(model.model_name)}-(?:{re.escape(recipient.id)}|fanout)-{TRANSFER_ID_PATTERN}"
    return remove_abandoned(staging_root, re.compile(names))

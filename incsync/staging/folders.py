"""The staging folder private to one transfer: locked while in use, removed on the way out or once abandoned."""

from __future__ import annotations

import fcntl
import logging
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.storage.locks import exclusive_lock
from incsync.storage.files import StoragePath
from incsync.core.transfer_id import TRANSFER_ID_PATTERN

if TYPE_CHECKING:
    from incsync.config.model import ModelConfig, RecipientConfig

log = logging.getLogger(__name__)


def remove(path: Path | StoragePath) -> None:
    if isinstance(path, StoragePath):
        path.rmtree()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _lock_file(path: Path | StoragePath) -> Path:
    if isinstance(path, StoragePath):
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
    """Remove a staging folder whose transfer no longer holds its lock; False when it is in use.

    A folder on an object store is removed only by the host whose transfer made it (its lock file is
    local); other hosts' leftovers are for the bucket's lifecycle rules (docs/storage.md).
    """
    lock = _lock_file(path)
    if isinstance(path, StoragePath) and not lock.exists():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        remove(path)
        lock.unlink(missing_ok=True)
    return True


def remove_stale_staging(staging_root: Path, model: ModelConfig, recipient: RecipientConfig) -> list[Path]:
    """Remove staging folders that dead transfers of (model, recipient) left behind.

    A live transfer holds its folder's lock (see ``claim``), so only abandoned ones go.
    """
    if not staging_root.is_dir():
        return []
    pattern = re.compile(rf"{re.escape(model.model_name)}-{re.escape(recipient.id)}-{TRANSFER_ID_PATTERN}")
    candidates = [p for p in staging_root.iterdir() if pattern.fullmatch(p.name) and p.is_dir()]
    removed = [path for path in candidates if remove_if_abandoned(path)]
    for path in removed:
        log.warning("removed staging %s left by an interrupted transfer", path)
    return removed

"""The transfer log of an object-storage prefix: where manifests live, what one says, which are committed.

Keys are relative to the destination's prefix::

    _manifests/<model>/dt=<date>/manifest_<transfer_id>.json         one per transfer: the commit point
    _manifests/<model>/_latest/recipient=<id>.json                   hint: the newest manifest of a recipient

With ``disable_manifest`` the same records live under ``_incsync/transfers/`` as ``transfer_<id>.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from incsync.destinations.base import FULL_REFRESH, TransferRecord
from incsync.storage.files import Store, open_store
from incsync.storage.filesystems import resolve_options
from incsync.storage.locks import exclusive_lock

MANIFEST_VERSION = 1
MANIFESTS = "_manifests"
PRIVATE_RECORDS = "_incsync/transfers"
LATEST = "_latest"
_MODEL_NAMESPACE = uuid.UUID("6f1c1f53-4a0e-4a57-9d5e-6b0c1a2d9e11")


def open_prefix(path: str | os.PathLike[str] | Store, storage_options: Mapping[str, str] | None = None) -> Store:
    """The store of a prefix given as a local folder, ``file://`` or object-store URL (or already open)."""
    if isinstance(path, Store):
        return path
    return open_store(path, resolve_options(storage_options, "storage_options"))


def sha256_checksum(fs: pafs.FileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _transfer_started(transfer_id: str, fallback: str) -> str:
    try:
        return datetime.strptime(transfer_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).isoformat()
    except ValueError:
        return fallback


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


class TransferLog:
    """The committed transfer records (manifests) of one prefix, and how to find the newest fast."""

    def __init__(self, store: Store, *, private: bool = False) -> None:
        self.store = store
        self.private = private
        self.base = PRIVATE_RECORDS if private else MANIFESTS
        self.prefix = "transfer_" if private else "manifest_"

    def model_dir(self, model: str) -> str:
        return f"{self.base}/{model}"

    def key(self, model: str, date: str, transfer_id: str) -> str:
        return f"{self.model_dir(model)}/dt={date}/{self.prefix}{transfer_id}.json"

    def pointer(self, model: str, recipient: str) -> str:
        return f"{self.model_dir(model)}/{LATEST}/recipient={recipient}.json"

    @contextmanager
    def lock(self, model: str, recipient: str) -> Iterator[None]:
        """One publisher per (model, recipient) on this host; the lease check covers the rest.

        An object store has no locks: the lock file of its prefix lives in this host's temporary folder.
        """
        pointer = self.pointer(model, recipient).removesuffix(".json") + ".lock"
        if self.store.local:
            lock = Path(self.store.path(pointer))
        else:
            digest = hashlib.sha256(self.store.uri(pointer).encode()).hexdigest()[:24]
            lock = Path(tempfile.gettempdir()) / "incsync-locks" / f"{digest}.lock"
        with exclusive_lock(lock):
            yield

    def _dates(self, model: str) -> list[str]:
        """The model's ``dt=`` folders (keys), newest first."""
        found = self.store.list(self.model_dir(model))
        names = [f.base_name for f in found if f.type == pafs.FileType.Directory and f.base_name.startswith("dt=")]
        return [f"{self.model_dir(model)}/{n}" for n in sorted(names, reverse=True)]

    def _files(self, folder: str) -> list[str]:
        """The record keys in a ``dt=`` folder, by name."""
        names = [f.base_name for f in self.store.list(folder) if f.type == pafs.FileType.File]
        return [f"{folder}/{n}" for n in sorted(names) if n.startswith(self.prefix) and n.endswith(".json")]

    def load(self, key: str) -> dict | None:
        """The JSON at ``key`` (a manifest or the pointer), None when it is gone."""
        try:
            return json.loads(self.store.read_text(key))
        except FileNotFoundError:
            return None

    def all(self, model: str) -> Iterator[dict]:
        for folder in self._dates(model):
            for key in self._files(folder):
                manifest = self.load(key)
                if manifest is not None:
                    yield manifest

    def newest(self, model: str, recipient: str) -> dict | None:
        """The recipient's committed manifest with the highest sequence number.

        The pointer names it unless a crash fell between a manifest's commit and the pointer's
        update; so look only at manifests named after the pointer's transfer id, in its date
        folder or later ones. Without a pointer, scan date folders newest first.
        """
        hint = self.load(self.pointer(model, recipient))
        best = self.load(hint["manifest_file_key"]) if hint else None
        if best is None:
            for folder in self._dates(model):
                mine = [m for m in map(self.load, self._files(folder)) if m and m["recipient"] == recipient]
                if mine:
                    return max(mine, key=lambda m: m["sequence"])
            return None
        since_date, since_id = f"dt={best['dt']}", best["transfer_id"][:16]
        for folder in self._dates(model):
            if folder.rsplit("/", 1)[1] < since_date:
                break
            for key in self._files(folder):
                if key.rsplit("/", 1)[1][len(self.prefix):][:16] < since_id:
                    continue
                m = self.load(key)
                if m and m["recipient"] == recipient and m["sequence"] > best["sequence"]:
                    best = m
        return best


def committed_manifests(
    path: str | os.PathLike[str] | Store, model: str, recipient: str, *, private: bool = False,
    storage_options: Mapping[str, str] | None = None, version: int | None = None,
) -> list[dict]:
    """The manifests a reader should apply, oldest first: from the newest FULL_REFRESH on (a full refresh,
    or the snapshot ``incsync maintain`` wrote of the live rows). ``version``: as of that manifest
    ``sequence`` (a reader of an older version), which maintenance keeps readable for its retention."""
    log = TransferLog(open_prefix(path, storage_options), private=private)
    mine = sorted((m for m in log.all(model) if m["recipient"] == recipient), key=lambda m: m["sequence"])
    return live_manifests([m for m in mine if version is None or m["sequence"] <= version])


def live_manifests(mine: list[dict]) -> list[dict]:
    """Of one recipient's manifests (by sequence), those a reader applies: from the newest FULL_REFRESH on."""
    refreshes = [i for i, m in enumerate(mine) if m["transfer_type"] == FULL_REFRESH]
    return mine[refreshes[-1]:] if refreshes else list(mine)


def new_manifest(
    *, store: Store, key: str, model: str, recipient: str, record: TransferRecord, sequence: int,
    files: list[dict], schema: pa.Schema, reader_schema: pa.Schema, schema_metadata: dict[str, object],
    deletes: dict[str, object],
) -> dict[str, object]:
    """The manifest committing ``record``: its data files (and delete files), bounds, HW and schemas."""
    date = record.committed_at[:10]
    return {
        "version": MANIFEST_VERSION,
        "transfer_id": record.transfer_id,
        "start_time": _transfer_started(record.transfer_id, record.committed_at),
        "end_time": datetime.now(timezone.utc).isoformat(),
        "model_id": str(uuid.uuid5(_MODEL_NAMESPACE, model)),
        "model_name": model,
        "bucket_name": "" if store.local else store.root.split("/", 1)[0],
        "bucket_prefix": store.root if store.local else store.root.partition("/")[2],
        "manifest_file_key": key,
        "file_format": "PARQUET",
        "transfer_type": record.transfer_type,
        "files": files,
        "recipient": recipient,
        "window_start": record.window_start,
        "window_end": record.window_end,
        "lower_bound": record.lower_bound,
        "upper_bound": record.upper_bound,
        "rows_transferred": record.rows_transferred,
        "delta_rows_transferred": record.delta_rows_transferred,
        "high_watermark": record.high_watermark.isoformat() if record.high_watermark else None,
        "schema": [{"name": f.name, "type": str(f.type)} for f in schema],
        "reader_schema": schema_to_text(reader_schema),
        **schema_metadata,
        "full_refresh_reason": record.extra.get("full_refresh_reason"),
        "dt": date,
        "sequence": sequence,
        "transfer_record": json.loads(record.to_json()),
        **deletes,
    }

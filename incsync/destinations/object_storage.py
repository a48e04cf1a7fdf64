"""Object storage destination: Parquet files moved into place, then a manifest written last, atomically.

Layout under the prefix (keys in manifests are relative to it)::

    <model>/recipient=<id>/dt=<date>/<transfer_id>-<n>.parquet      data files
    _manifests/<model>/dt=<date>/manifest_<transfer_id>.json         one per transfer: the commit point
    _manifests/<model>/_latest/recipient=<id>.json                   hint: the newest manifest of a recipient

The manifest's atomic rename commits a transfer; files no manifest lists are invisible to
``read_manifested`` and removed by ``janitor`` once older than its grace period. With
``disable_manifest`` the same records go to ``_incsync/transfers/`` instead (incsync still needs them
for the high watermark), and readers see files as they land. Transfers append, so rows re-read by the
lookback appear once per transfer that read them; a FULL_REFRESH manifest supersedes all earlier ones.

Each manifest carries ``reader_schema``: the schema a reader gets combining it with the committed
manifests before it (a widening promotes the column). A batch whose type change is no widening is
refused until a full refresh, so no manifest is ever published that readers cannot combine.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from incsync.config import ModelConfig, ObjectStorageDestinationConfig, RecipientConfig
from incsync.crashpoints import crash_point
from incsync.destinations.base import (
    DELETED_AT,
    FULL_REFRESH,
    REPAIR,
    Destination,
    DestinationState,
    Removals,
    TransferRecord,
    reset_reason,
)
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import OWNER_FILE, Owner, check_owner, now_iso, owner_of
from incsync.errors import PublishError
from incsync.lease import lost_lease
from incsync.schema_change import SchemaDiff, arrow_diff, change_metadata, conform, incompatible_error
from incsync.staged_batch import StagedBatch
from incsync.filesystems import resolve_options
from incsync.storage import Store, open_store

MANIFEST_VERSION = 1
MANIFESTS = "_manifests"
PRIVATE_RECORDS = "_incsync/transfers"
LATEST = "_latest"
_MODEL_NAMESPACE = uuid.UUID("6f1c1f53-4a0e-4a57-9d5e-6b0c1a2d9e11")


def _store(path: str | os.PathLike[str] | Store, storage_options: Mapping[str, str] | None = None) -> Store:
    if isinstance(path, Store):
        return path
    return open_store(path, resolve_options(storage_options, "storage_options"))


def _sha256(fs: pafs.FileSystem, path: str) -> str:
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


class TransferLog:
    """The committed transfer records (manifests) of one prefix, and how to find the newest fast."""

    def __init__(self, store: Store, *, private: bool = False):
        self.store = store
        self.base = PRIVATE_RECORDS if private else MANIFESTS
        self.prefix = "transfer_" if private else "manifest_"

    def model_dir(self, model: str) -> str:
        return f"{self.base}/{model}"

    def key(self, model: str, date: str, transfer_id: str) -> str:
        return f"{self.model_dir(model)}/dt={date}/{self.prefix}{transfer_id}.json"

    def pointer(self, model: str, recipient: str) -> str:
        return f"{self.model_dir(model)}/{LATEST}/recipient={recipient}.json"

    def _dates(self, model: str) -> list[str]:
        """The model's ``dt=`` folders (keys), newest first."""
        found = self.store.list(self.model_dir(model))
        names = [f.base_name for f in found if f.type == pafs.FileType.Directory and f.base_name.startswith("dt=")]
        return [f"{self.model_dir(model)}/{n}" for n in sorted(names, reverse=True)]

    def _files(self, folder: str) -> list[str]:
        """The record keys in a ``dt=`` folder, by name."""
        names = [f.base_name for f in self.store.list(folder) if f.type == pafs.FileType.File]
        return [f"{folder}/{n}" for n in sorted(names) if n.startswith(self.prefix) and n.endswith(".json")]

    def _load(self, key: str) -> dict | None:
        try:
            return json.loads(self.store.read_text(key))
        except FileNotFoundError:
            return None

    def all(self, model: str) -> Iterator[dict]:
        for folder in self._dates(model):
            for key in self._files(folder):
                manifest = self._load(key)
                if manifest is not None:
                    yield manifest

    def newest(self, model: str, recipient: str) -> dict | None:
        """The recipient's committed manifest with the highest sequence number.

        The pointer names it unless a crash fell between a manifest's commit and the pointer's
        update; so look only at manifests named after the pointer's transfer id, in its date
        folder or later ones. Without a pointer, scan date folders newest first.
        """
        hint = self._load(self.pointer(model, recipient))
        best = self._load(hint["manifest_file_key"]) if hint else None
        if best is None:
            for folder in self._dates(model):
                mine = [m for m in map(self._load, self._files(folder)) if m and m["recipient"] == recipient]
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
                m = self._load(key)
                if m and m["recipient"] == recipient and m["sequence"] > best["sequence"]:
                    best = m
        return best


class ObjectStorageDestination(Destination):
    """Parquet + manifests under a prefix: a local folder, ``file://`` or an object store (``s3://``, ...)."""

    kind = "object_storage"

    def __init__(self, config: ObjectStorageDestinationConfig):
        self.config = config
        self.name = config.name
        self.storage_options = resolve_options(config.storage_options, f"destinations[{config.name}].storage_options")
        self.store = open_store(config.path, self.storage_options)
        self.root = self.store.uri()
        self.log = TransferLog(self.store, private=config.disable_manifest)

    def _prefix(self, model: ModelConfig, recipient: RecipientConfig) -> str:
        return f"{model.model_name}/recipient={recipient.id}"

    def _data_keys(self, model: ModelConfig, recipient: RecipientConfig) -> set[str]:
        """The Parquet keys under the recipient's prefix, in one listing."""
        found = self.store.list(self._prefix(model, recipient), recursive=True)
        return {self.store.relative(f.path) for f in found if f.type == pafs.FileType.File and f.path.endswith(".parquet")}

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The newest manifest, checked against the files: manifests or data files deleted mean a re-sync."""
        manifest = self.log.newest(model.model_name, recipient.id)
        where = f"prefix {self.store.uri(self._prefix(model, recipient))}"
        stamp = self.owner(model, recipient)
        moved = stamp.moved_reason(manifest["transfer_id"] if manifest else None) if stamp else None
        if moved:
            record = TransferRecord(**manifest["transfer_record"]) if manifest else None
            return DestinationState(last_transfer=record, version=str(manifest["sequence"]) if manifest else None,
                                    reset_reason=f"destination_reset: {moved}")
        if manifest is None:
            pointer = self.log.pointer(model.model_name, recipient.id)
            if self.store.exists(pointer):
                return DestinationState(reset_reason=f"destination_reset: the manifests of {where} were deleted "
                                        f"({self.store.uri(pointer)} names one that is gone)")
            has_data = bool(self._data_keys(model, recipient))
            return DestinationState(reset_reason=reset_reason(where, None, has_data=has_data))
        present = self._data_keys(model, recipient)
        gone = [k for k in self._live_files(model, recipient, manifest) if k not in present]
        missing = f"{len(gone)} data file(s) of manifest {manifest['manifest_file_key']} are missing (e.g. {gone[0]})" if gone else None
        record = TransferRecord(**manifest["transfer_record"])
        return DestinationState(last_transfer=record, version=str(manifest["sequence"]),
                                reset_reason=reset_reason(where, record, has_data=True, missing=missing))

    @contextmanager
    def _lock(self, model: ModelConfig, recipient: RecipientConfig) -> Iterator[None]:
        """One publisher per (model, recipient) on this host; the lease check below covers the rest.

        An object store has no locks: the lock file of its prefix lives in this host's temporary folder.
        """
        pointer = self.log.pointer(model.model_name, recipient.id).removesuffix(".json") + ".lock"
        if self.store.local:
            lock = Path(self.store.path(pointer))
        else:
            digest = hashlib.sha256(self.store.uri(pointer).encode()).hexdigest()[:24]
            lock = Path(tempfile.gettempdir()) / "incsync-locks" / f"{digest}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
        removals: Removals | None = None,
    ) -> dict[str, object]:
        with self._lock(model, recipient):
            current = self.read_state(model=model, recipient=recipient)
            if current.version != expected.version:
                now = current.last_transfer.transfer_id if current.last_transfer else None
                was = expected.last_transfer.transfer_id if expected.last_transfer else None
                raise lost_lease(model=model.model_name, recipient=recipient.id, where=self.root, read=was, now=now)
            previous = self._reader_schema(model, recipient)
            refresh = record.transfer_type == FULL_REFRESH
            change = SchemaDiff() if previous is None else arrow_diff(previous, batch.schema)
            if change.incompatible and not refresh:
                raise incompatible_error(
                    f"model {model.model_name}, recipient {recipient.id}", f"{self.root} (its earlier manifests)",
                    change.incompatible, model=model.model_name, recipient=recipient.id,
                )
            combined = batch.schema if previous is None or refresh else pa.unify_schemas(
                [previous, batch.schema], promote_options="permissive")
            # A full refresh supersedes the earlier manifests: columns the source dropped are gone, not kept.
            metadata = change_metadata(change, replace(change, dropped=()) if refresh else change, replaced=refresh)
            me = owner_of(model, recipient)
            stamp = self.owner(model, recipient)
            check_owner(stamp, me, where=self._where(model, recipient))
            try:
                if stamp is None:  # first transfer (or one written before stamps): stamped before its manifest
                    self._stamp(me, previous=None, reason=f"first transfer {record.transfer_id}")
                return {**self._publish(model=model, recipient=recipient, batch=batch, record=record,
                                        sequence=int(expected.version or 0) + 1, reader_schema=combined,
                                        schema_metadata=metadata, removals=removals), OWNER_KEY: recipient.id}
            except OSError as exc:
                raise PublishError(
                    f"model {model.model_name}, recipient {recipient.id}: writing to {self.root} failed and no manifest "
                    f"was written, so readers see nothing of this transfer: {exc}"
                ) from exc

    def _reader_schema(self, model: ModelConfig, recipient: RecipientConfig) -> pa.Schema | None:
        """What a reader of (model, recipient)'s committed manifests gets; None before the first."""
        newest = self.log.newest(model.model_name, recipient.id)
        if newest is None:
            return None
        if "reader_schema" in newest:
            return schema_from_text(newest["reader_schema"])
        # Manifests from before reader_schema: unify their files' schemas once.
        manifests = committed_manifests(self.store, model.model_name, recipient.id, private=self.config.disable_manifest)
        schemas = [pq.read_schema(self.store.path(f["data_file_key"]), filesystem=self.store.fs)
                   for m in manifests for f in m["files"]]
        return pa.unify_schemas(schemas, promote_options="permissive") if schemas else None

    def _live_files(self, model: ModelConfig, recipient: RecipientConfig, newest: dict) -> list[str]:
        """The data files a reader of (model, recipient) reads: the newest manifest's, plus those the
        pointer lists for the manifests since the last full refresh (rebuilt from the manifests when the
        pointer is behind, after a crash, or was written before it kept the list)."""
        keys = [f["data_file_key"] for f in newest["files"]]
        if newest["transfer_type"] == FULL_REFRESH:
            return keys
        hint = self.log._load(self.log.pointer(model.model_name, recipient.id)) or {}
        if hint.get("sequence") == newest["sequence"] and "live_files" in hint:
            return hint["live_files"]
        if hint.get("sequence") == newest["sequence"] - 1 and "live_files" in hint:
            return hint["live_files"] + keys
        manifests = committed_manifests(self.store, model.model_name, recipient.id, private=self.config.disable_manifest)
        return [f["data_file_key"] for m in manifests for f in m["files"]]

    def _stamp_path(self, model: str, recipient: str) -> str:
        return f"{model}/recipient={recipient}/{OWNER_FILE}"

    def _where(self, model: ModelConfig, recipient: RecipientConfig) -> str:
        return f"object-storage prefix {self.store.uri(self._prefix(model, recipient))} (destination {self.name})"

    def owner(self, model: ModelConfig, recipient: RecipientConfig) -> Owner | None:
        try:
            return Owner.from_json(self.store.read_text(self._stamp_path(model.model_name, recipient.id)))
        except FileNotFoundError:
            return None

    def _stamp(self, owner: Owner, *, previous: Owner | None, reason: str) -> None:
        path = self._stamp_path(owner.model, owner.recipient)
        try:
            history = json.loads(self.store.read_text(path)).get("history", [])
        except FileNotFoundError:
            history = []
        history.append({"owner": json.loads(owner.to_json()), "previous": json.loads(previous.to_json()) if previous else None,
                        "reason": reason, "at": now_iso()})
        self.store.write(path, json.dumps({**json.loads(owner.to_json()), "history": history}, indent=1))

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with self._lock(model, recipient):
            previous = self.owner(model, recipient)
            last = self.log.newest(model.model_name, recipient.id)
            new = replace(owner_of(model, recipient), moved=last["transfer_id"] if last else "")
            self._stamp(new, previous=previous, reason=reason)
        return previous

    def _publish(
        self, *, model: ModelConfig, recipient: RecipientConfig, batch: StagedBatch, record: TransferRecord, sequence: int,
        reader_schema: pa.Schema, schema_metadata: dict[str, object], removals: Removals | None = None,
    ) -> dict[str, object]:
        date = record.committed_at[:10]
        folder = f"{self._prefix(model, recipient)}/dt={date}"
        deletes = self._delete_files(model, batch, record, folder, removals)
        files = []
        source = batch.filesystem
        for n, staged in enumerate(batch.files):
            target = f"{folder}/{record.transfer_id}-{n:05d}.parquet"
            entry = {"sha256_checksum": _sha256(source, str(staged)),
                     "row_count": pq.read_metadata(str(staged), filesystem=source).num_rows}
            self.store.put_file(source, str(staged), target, move=True)
            files.append({"data_file_key": target, **entry})
        crash_point("mid_publish")
        key = self.log.key(model.model_name, date, record.transfer_id)
        manifest = {
            "version": MANIFEST_VERSION,
            "transfer_id": record.transfer_id,
            "start_time": _transfer_started(record.transfer_id, record.committed_at),
            "end_time": datetime.now(timezone.utc).isoformat(),
            "model_id": str(uuid.uuid5(_MODEL_NAMESPACE, model.model_name)),
            "model_name": model.model_name,
            "bucket_name": "" if self.store.local else self.store.root.split("/", 1)[0],
            "bucket_prefix": self.store.root if self.store.local else self.store.root.partition("/")[2],
            "manifest_file_key": key,
            "file_format": "PARQUET",
            "transfer_type": record.transfer_type,
            "files": files,
            "recipient": recipient.id,
            "window_start": record.window_start,
            "window_end": record.window_end,
            "lower_bound": record.lower_bound,
            "upper_bound": record.upper_bound,
            "rows_transferred": record.rows_transferred,
            "delta_rows_transferred": record.delta_rows_transferred,
            "high_watermark": record.high_watermark.isoformat() if record.high_watermark else None,
            "schema": [{"name": f.name, "type": str(f.type)} for f in batch.schema],
            "reader_schema": schema_to_text(reader_schema),
            **schema_metadata,
            "full_refresh_reason": record.extra.get("full_refresh_reason"),
            "dt": date,
            "sequence": sequence,
            "transfer_record": json.loads(record.to_json()),
            **deletes,
        }
        if self.config.signing_key_env:
            from incsync.integrity.signing import load_private_key, sign_manifest

            manifest = sign_manifest(manifest, load_private_key(self.config.signing_key_env, destination=self.name))
        # The commit point: a key only this transfer writes, visible whole or not at all (docs/storage.md).
        self.store.write_once(key, json.dumps(manifest, indent=1, sort_keys=True))
        crash_point("after_manifest")
        pointer = {"manifest_file_key": key, "sequence": sequence, "transfer_id": record.transfer_id,
                   "live_files": self._live_files(model, recipient, manifest)}
        self.store.write(self.log.pointer(model.model_name, recipient.id), json.dumps(pointer))
        return {"manifest_file_key": key, "files_written": len(files), **schema_metadata}

    def _delete_files(
        self, model: ModelConfig, batch: StagedBatch, record: TransferRecord, folder: str, removals: Removals | None,
    ) -> dict[str, object]:
        """The keys this transfer replaces (a repair's rows) or removes, as one Parquet file its manifest lists:
        readers drop earlier manifests' rows of those keys (``read_manifested``)."""
        pk = list(model.primary_key)
        parts = []
        if record.transfer_type == REPAIR and batch.rows:
            parts.append(batch.table(columns=pk))
        if removals is not None and removals.rows:
            parts.append(pa.table({c: removals.keys[c].cast(batch.schema.field(c).type) if c in batch.schema.names
                                   else removals.keys[c] for c in pk}))
        if not parts:
            return {}
        keys = pa.concat_tables(parts)
        target = f"{folder}/{record.transfer_id}-delete-00000.parquet"
        self.store.mkdir(folder)
        pq.write_table(keys, self.store.path(target), filesystem=self.store.fs)
        entry = {"data_file_key": target, "sha256_checksum": _sha256(self.store.fs, self.store.path(target)),
                 "row_count": keys.num_rows}
        mode = removals.mode if removals is not None else "hard"
        return {"delete_files": [entry], "delete_mode": mode,
                "deleted_at": removals.at.isoformat() if removals is not None and removals.at else None,
                "replaced_rows": batch.rows if record.transfer_type == REPAIR else 0,
                "removed_rows": removals.rows if removals is not None else 0}


def committed_manifests(
    path: str | os.PathLike[str] | Store, model: str, recipient: str, *, private: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> list[dict]:
    """The manifests a reader should apply, oldest first: from the newest FULL_REFRESH on."""
    log = TransferLog(_store(path, storage_options), private=private)
    mine = sorted((m for m in log.all(model) if m["recipient"] == recipient), key=lambda m: m["sequence"])
    refreshes = [i for i, m in enumerate(mine) if m["transfer_type"] == FULL_REFRESH]
    return mine[refreshes[-1]:] if refreshes else mine


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def read_manifested(
    path: str | os.PathLike[str] | Store, model: str, recipient: str, *, private: bool = False,
    storage_options: Mapping[str, str] | None = None, public_key: str | bytes | None = None,
) -> pa.Table:
    """Exactly the rows of (model, recipient)'s committed transfers in one schema: the newest manifest's
    ``reader_schema`` (widened columns promoted, new columns NULL in older rows).

    ``path`` is a local folder, ``file://`` or an object-store URL; ``storage_options`` as in the config.
    ``public_key`` (Ed25519: raw, base64 or PEM): every manifest read must be signed by it and every file
    must have its signed sha256, else ``ManifestIntegrityError`` before any row is returned."""
    store = _store(path, storage_options)
    manifests = committed_manifests(store, model, recipient, private=private)
    if public_key is not None:
        from incsync.integrity.signing import verify_manifest

        for m in manifests:
            verify_manifest(m, public_key, store=store)
    schema = schema_from_text(manifests[-1]["reader_schema"]) if manifests and "reader_schema" in manifests[-1] else None

    def read(entry: dict) -> pa.Table:
        return pq.read_table(store.path(entry["data_file_key"]), filesystem=store.fs)

    tables: list[pa.Table] = []
    for m in manifests:
        if m.get("delete_files") and tables:
            # A repair or delete: the keys it lists leave (hard) or are stamped in (soft) the rows before it.
            keys = pa.concat_tables([read(f) for f in m["delete_files"]])
            before = _combined(tables, schema)
            tables = [_apply_deletes(before, keys, m.get("delete_mode", "hard"), m.get("deleted_at"))]
        tables += [read(f) for f in m["files"]]
    if not tables:
        return pa.table({})
    return _combined(tables, schema)


def _combined(tables: list[pa.Table], schema: pa.Schema | None) -> pa.Table:
    if schema is not None:
        if any(DELETED_AT in t.schema.names for t in tables) and DELETED_AT not in schema.names:
            schema = schema.append(pa.field(DELETED_AT, pa.timestamp("us", tz="UTC")))
        return pa.concat_tables([conform(t, schema) for t in tables])
    return pa.concat_tables(tables, promote_options="permissive")


def _apply_deletes(table: pa.Table, keys: pa.Table, mode: str, at: str | None) -> pa.Table:
    import pyarrow.compute as pc

    from incsync.integrity.canonical import arrow_text

    names = keys.schema.names
    listed = pc.is_in(arrow_text(table, names), value_set=arrow_text(keys, names))
    if mode != "soft":
        return table.filter(pc.invert(listed))
    stamp = pa.scalar(datetime.fromisoformat(at) if at else datetime.now(timezone.utc), pa.timestamp("us", tz="UTC"))
    current = table[DELETED_AT] if DELETED_AT in table.schema.names else pa.nulls(table.num_rows, stamp.type)
    stamped = pc.if_else(pc.and_(listed, pc.is_null(current)), stamp, current)
    if DELETED_AT in table.schema.names:
        return table.set_column(table.schema.get_field_index(DELETED_AT), DELETED_AT, stamped)
    return table.append_column(pa.field(DELETED_AT, stamp.type), stamped)


def latest_versions(table: pa.Table, primary_key: list[str], last_modified_column: str) -> pa.Table:
    """What an upsert destination would hold: per primary key, the row with the greatest last-modified."""
    if table.num_rows == 0:
        return table
    ranked = table.sort_by([*((c, "ascending") for c in primary_key), (last_modified_column, "descending")])
    keys = ranked.select(primary_key).to_pylist()
    return ranked.take([i for i, key in enumerate(keys) if i == 0 or key != keys[i - 1]])


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
    store = _store(path, storage_options)
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

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
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from incsync.config import ModelConfig, ObjectStorageDestinationConfig, RecipientConfig
from incsync.crashpoints import crash_point
from incsync.destinations.base import FULL_REFRESH, Destination, DestinationState, TransferRecord, reset_reason
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import OWNER_FILE, Owner, check_owner, now_iso, owner_of
from incsync.errors import ConfigError, LeaseError, PublishError
from incsync.schema_change import SchemaDiff, arrow_diff, change_metadata, conform, incompatible_error
from incsync.staging import StagedBatch

MANIFEST_VERSION = 1
MANIFESTS = "_manifests"
PRIVATE_RECORDS = "_incsync/transfers"
LATEST = "_latest"
_MODEL_NAMESPACE = uuid.UUID("6f1c1f53-4a0e-4a57-9d5e-6b0c1a2d9e11")


def _atomic_write(path: Path, text: str) -> None:
    """Write ``path`` so that a reader sees the old content or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _transfer_started(transfer_id: str, fallback: str) -> str:
    try:
        return datetime.strptime(transfer_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).isoformat()
    except ValueError:
        return fallback


class TransferLog:
    """The committed transfer records (manifests) of one prefix, and how to find the newest fast."""

    def __init__(self, root: Path, *, private: bool = False):
        self.root = root
        self.base = root / (PRIVATE_RECORDS if private else MANIFESTS)
        self.prefix = "transfer_" if private else "manifest_"

    def model_dir(self, model: str) -> Path:
        return self.base / model

    def key(self, model: str, date: str, transfer_id: str) -> str:
        return str((self.model_dir(model) / f"dt={date}" / f"{self.prefix}{transfer_id}.json").relative_to(self.root))

    def pointer(self, model: str, recipient: str) -> Path:
        return self.model_dir(model) / LATEST / f"recipient={recipient}.json"

    def _dates(self, model: str) -> list[Path]:
        folder = self.model_dir(model)
        if not folder.is_dir():
            return []
        return sorted((p for p in folder.iterdir() if p.is_dir() and p.name.startswith("dt=")), reverse=True)

    def _load(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None

    def all(self, model: str) -> Iterator[dict]:
        for folder in self._dates(model):
            for path in sorted(folder.glob(f"{self.prefix}*.json")):
                manifest = self._load(path)
                if manifest is not None:
                    yield manifest

    def newest(self, model: str, recipient: str) -> dict | None:
        """The recipient's committed manifest with the highest sequence number.

        The pointer names it unless a crash fell between a manifest's commit and the pointer's
        update; so look only at manifests named after the pointer's transfer id, in its date
        folder or later ones. Without a pointer, scan date folders newest first.
        """
        hint = self._load(self.pointer(model, recipient))
        best = self._load(self.root / hint["manifest_file_key"]) if hint else None
        if best is None:
            for folder in self._dates(model):
                mine = [m for m in map(self._load, folder.glob(f"{self.prefix}*.json")) if m and m["recipient"] == recipient]
                if mine:
                    return max(mine, key=lambda m: m["sequence"])
            return None
        since_date, since_id = f"dt={best['dt']}", best["transfer_id"][:16]
        for folder in self._dates(model):
            if folder.name < since_date:
                break
            for path in folder.glob(f"{self.prefix}*.json"):
                if path.stem[len(self.prefix):][:16] < since_id:
                    continue
                m = self._load(path)
                if m and m["recipient"] == recipient and m["sequence"] > best["sequence"]:
                    best = m
        return best


class ObjectStorageDestination(Destination):
    """Parquet + manifests under a local prefix (``s3a://`` needs the Hadoop AWS jars, absent here)."""

    kind = "object_storage"

    def __init__(self, config: ObjectStorageDestinationConfig):
        if "://" in config.path and not config.path.startswith("file://"):
            raise ConfigError(
                "destinations",
                [f"{config.name}.path: {config.path.split('://')[0]}:// needs the Hadoop AWS jars on Spark's "
                 "classpath, which this installation lacks; use a local or mounted path"],
            )
        self.config = config
        self.name = config.name
        self.root = Path(config.path.removeprefix("file://"))
        self.log = TransferLog(self.root, private=config.disable_manifest)

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The newest manifest, checked against the files: manifests or data files deleted mean a re-sync."""
        manifest = self.log.newest(model.model_name, recipient.id)
        where = f"prefix {self.root / model.model_name / f'recipient={recipient.id}'}"
        stamp = self.owner(model, recipient)
        moved = stamp.moved_reason(manifest["transfer_id"] if manifest else None) if stamp else None
        if moved:
            record = TransferRecord(**manifest["transfer_record"]) if manifest else None
            return DestinationState(last_transfer=record, version=str(manifest["sequence"]) if manifest else None,
                                    reset_reason=f"destination_reset: {moved}")
        if manifest is None:
            pointer = self.log.pointer(model.model_name, recipient.id)
            if pointer.exists():
                return DestinationState(reset_reason=f"destination_reset: the manifests of {where} were deleted ({pointer} "
                                        "names one that is gone)")
            has_data = any((self.root / model.model_name / f"recipient={recipient.id}").glob("dt=*/*.parquet"))
            return DestinationState(reset_reason=reset_reason(where, None, has_data=has_data))
        gone = [k for k in self._live_files(model, recipient, manifest) if not (self.root / k).exists()]
        missing = f"{len(gone)} data file(s) of manifest {manifest['manifest_file_key']} are missing (e.g. {gone[0]})" if gone else None
        record = TransferRecord(**manifest["transfer_record"])
        return DestinationState(last_transfer=record, version=str(manifest["sequence"]),
                                reset_reason=reset_reason(where, record, has_data=True, missing=missing))

    @contextmanager
    def _lock(self, model: ModelConfig, recipient: RecipientConfig) -> Iterator[None]:
        """One publisher per (model, recipient) on this host; the lease check below covers the rest."""
        lock = self.log.pointer(model.model_name, recipient.id).with_suffix(".lock")
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
    ) -> dict[str, object]:
        with self._lock(model, recipient):
            current = self.read_state(model=model, recipient=recipient)
            if current.version != expected.version:
                now = current.last_transfer.transfer_id if current.last_transfer else None
                was = expected.last_transfer.transfer_id if expected.last_transfer else None
                raise LeaseError(
                    f"model {model.model_name}, recipient {recipient.id}: transfer {now} committed to {self.root} "
                    f"after this transfer read {was}; nothing was published. Re-run the window."
                )
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
                                        schema_metadata=metadata), OWNER_KEY: recipient.id}
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
        manifests = committed_manifests(self.root, model.model_name, recipient.id, private=self.config.disable_manifest)
        schemas = [pq.read_schema(self.root / f["data_file_key"]) for m in manifests for f in m["files"]]
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
        manifests = committed_manifests(self.root, model.model_name, recipient.id, private=self.config.disable_manifest)
        return [f["data_file_key"] for m in manifests for f in m["files"]]

    def _stamp_path(self, model: str, recipient: str) -> Path:
        return self.root / model / f"recipient={recipient}" / OWNER_FILE

    def _where(self, model: ModelConfig, recipient: RecipientConfig) -> str:
        return f"object-storage prefix {self.root / model.model_name / f'recipient={recipient.id}'} (destination {self.name})"

    def owner(self, model: ModelConfig, recipient: RecipientConfig) -> Owner | None:
        try:
            return Owner.from_json(self._stamp_path(model.model_name, recipient.id).read_text())
        except FileNotFoundError:
            return None

    def _stamp(self, owner: Owner, *, previous: Owner | None, reason: str) -> None:
        path = self._stamp_path(owner.model, owner.recipient)
        try:
            history = json.loads(path.read_text()).get("history", [])
        except FileNotFoundError:
            history = []
        history.append({"owner": json.loads(owner.to_json()), "previous": json.loads(previous.to_json()) if previous else None,
                        "reason": reason, "at": now_iso()})
        _atomic_write(path, json.dumps({**json.loads(owner.to_json()), "history": history}, indent=1))

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with self._lock(model, recipient):
            previous = self.owner(model, recipient)
            last = self.log.newest(model.model_name, recipient.id)
            new = replace(owner_of(model, recipient), moved=last["transfer_id"] if last else "")
            self._stamp(new, previous=previous, reason=reason)
        return previous

    def _publish(
        self, *, model: ModelConfig, recipient: RecipientConfig, batch: StagedBatch, record: TransferRecord, sequence: int,
        reader_schema: pa.Schema, schema_metadata: dict[str, object],
    ) -> dict[str, object]:
        date = record.committed_at[:10]
        folder = self.root / model.model_name / f"recipient={recipient.id}" / f"dt={date}"
        files = []
        for n, staged in enumerate(batch.files):
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{record.transfer_id}-{n:05d}.parquet"
            entry = {"sha256_checksum": _sha256(staged), "row_count": pq.ParquetFile(staged).metadata.num_rows}
            shutil.move(staged, target)
            os.utime(target)  # the janitor's grace period counts from landing, not from staging
            files.append({"data_file_key": str(target.relative_to(self.root)), **entry})
        crash_point("mid_publish")
        key = self.log.key(model.model_name, date, record.transfer_id)
        manifest = {
            "version": MANIFEST_VERSION,
            "transfer_id": record.transfer_id,
            "start_time": _transfer_started(record.transfer_id, record.committed_at),
            "end_time": datetime.now(timezone.utc).isoformat(),
            "model_id": str(uuid.uuid5(_MODEL_NAMESPACE, model.model_name)),
            "model_name": model.model_name,
            "bucket_name": "",
            "bucket_prefix": str(self.root),
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
        }
        _atomic_write(self.root / key, json.dumps(manifest, indent=1, sort_keys=True))
        crash_point("after_manifest")
        pointer = {"manifest_file_key": key, "sequence": sequence, "transfer_id": record.transfer_id,
                   "live_files": self._live_files(model, recipient, manifest)}
        _atomic_write(self.log.pointer(model.model_name, recipient.id), json.dumps(pointer))
        return {"manifest_file_key": key, "files_written": len(files), **schema_metadata}

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        return read_manifested(self.root, model.model_name, recipient.id, private=self.config.disable_manifest)


def committed_manifests(path: str | os.PathLike[str], model: str, recipient: str, *, private: bool = False) -> list[dict]:
    """The manifests a reader should apply, oldest first: from the newest FULL_REFRESH on."""
    log = TransferLog(Path(path), private=private)
    mine = sorted((m for m in log.all(model) if m["recipient"] == recipient), key=lambda m: m["sequence"])
    refreshes = [i for i, m in enumerate(mine) if m["transfer_type"] == FULL_REFRESH]
    return mine[refreshes[-1]:] if refreshes else mine


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def read_manifested(path: str | os.PathLike[str], model: str, recipient: str, *, private: bool = False) -> pa.Table:
    """Exactly the rows of (model, recipient)'s committed transfers in one schema: the newest manifest's
    ``reader_schema`` (widened columns promoted, new columns NULL in older rows)."""
    root = Path(path)
    manifests = committed_manifests(root, model, recipient, private=private)
    tables = [pq.read_table(root / f["data_file_key"]) for m in manifests for f in m["files"]]
    if not tables:
        return pa.table({})
    if "reader_schema" in manifests[-1]:
        schema = schema_from_text(manifests[-1]["reader_schema"])
        return pa.concat_tables([conform(t, schema) for t in tables])
    return pa.concat_tables(tables, promote_options="permissive")


def latest_versions(table: pa.Table, primary_key: list[str], last_modified_column: str) -> pa.Table:
    """What an upsert destination would hold: per primary key, the row with the greatest last-modified."""
    if table.num_rows == 0:
        return table
    ranked = table.sort_by([*((c, "ascending") for c in primary_key), (last_modified_column, "descending")])
    keys = ranked.select(primary_key).to_pylist()
    return ranked.take([i for i, key in enumerate(keys) if i == 0 or key != keys[i - 1]])


def janitor(
    path: str | os.PathLike[str], *, grace_seconds: float = 6 * 3600, now: float | None = None, dry_run: bool = False
) -> list[Path]:
    """Remove data files no manifest lists (and stale temp files) older than the grace period.

    The grace period must exceed the longest publish: a transfer's files land before its manifest.
    """
    root = Path(path)
    cutoff = (time.time() if now is None else now) - grace_seconds
    listed: set[str] = set()
    for private in (False, True):
        log = TransferLog(root, private=private)
        if log.base.is_dir():
            for model_dir in (p for p in log.base.iterdir() if p.is_dir()):
                listed.update(f["data_file_key"] for m in log.all(model_dir.name) for f in m["files"])
    doomed = [
        p for p in root.glob("*/recipient=*/dt=*/*.parquet")
        if str(p.relative_to(root)) not in listed and p.stat().st_mtime < cutoff
    ]
    doomed += [p for p in root.glob("_*/**/.*.tmp") if p.stat().st_mtime < cutoff]
    if not dry_run:
        for p in doomed:
            p.unlink(missing_ok=True)
    return sorted(doomed)

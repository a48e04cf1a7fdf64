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
``incsync maintain`` writes a snapshot manifest of each recipient's live rows and later deletes what it
superseded (``compact``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from incsync.config.destinations import ObjectStorageDestinationConfig
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.crashpoints import crash_point
from incsync.core.lease import lost_lease
from incsync.core.schema_change import SchemaDiff, arrow_diff, change_metadata, incompatible_error
from incsync.destinations.base import (
    FULL_REFRESH,
    REPAIR,
    Capabilities,
    Destination,
    DestinationState,
    Location,
    Removals,
    TransferRecord,
    reset_reason,
)
from incsync.destinations.maintenance import Maintained
from incsync.destinations.object_storage.manifests import (
    TransferLog,
    committed_manifests,
    new_manifest,
    sha256_checksum,
)
from incsync.destinations.object_storage.owner import read_stamp, write_stamp
from incsync.destinations.object_storage.reader import latest_versions, read_manifested, reader_schema
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import Owner, check_owner, owner_of
from incsync.errors import PublishError
from incsync.staging.batch import StagedBatch
from incsync.storage.files import open_store
from incsync.storage.filesystems import resolve_options
from incsync.storage.names import is_url
from incsync.storage.reach import check_storage


class ObjectStorageDestination(Destination):
    """Parquet + manifests under a prefix: a local folder, ``file://`` or an object store (``s3://``, ...)."""

    kind = "object_storage"
    capabilities = Capabilities(
        upserts=False, recipient_views=False, maintained=True,
        lacks=(("upserts", "append-only: each transfer adds Parquet files under a manifest; readers take each key's newest row"),
               ("recipient_views", "a prefix of files has no views; readers' engines hold them"),
               ("infinities", "Parquet timestamps and dates have no infinity")),
    )

    def __init__(self, config: ObjectStorageDestinationConfig) -> None:
        self.config = config
        self.name = config.name
        self.storage_options = resolve_options(config.storage_options, f"destinations[{config.name}].storage_options")
        self.store = open_store(config.path, self.storage_options)
        self.root = self.store.uri()
        self.log = TransferLog(self.store, private=config.disable_manifest)

    def _prefix(self, model: ModelConfig, recipient: RecipientConfig) -> str:
        return f"{model.model_name}/recipient={recipient.id}"

    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        path = f"{self.root.rstrip('/')}/{self._prefix(model, recipient)}"
        return Location(shown=path, path=path)

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        """Every row of the recipient's committed manifests: an append log, so a key may occur once per transfer."""
        return read_manifested(self.store, model.model_name, recipient.id, private=self.config.disable_manifest)

    def current_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        table = self.read_rows(model=model, recipient=recipient)
        if table.num_rows == 0:
            return table
        return latest_versions(table, list(model.primary_key), model.last_modified_column)

    def stored_schema(self, *, model: ModelConfig, recipient: RecipientConfig) -> dict[str, str] | None:
        schema = reader_schema(self.log, self.store, model.model_name, recipient.id)
        return None if schema is None else {f.name: str(f.type) for f in schema}

    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        previous = reader_schema(self.log, self.store, model.model_name, recipient.id)
        return None if previous is None else arrow_diff(previous, staged)

    def check(self) -> None:
        if is_url(self.config.path):
            check_storage(f"destinations[{self.name}]", self.config.path, self.config.storage_options)

    def _data_keys(self, model: ModelConfig, recipient: RecipientConfig) -> set[str]:
        """The Parquet keys under the recipient's prefix, in one listing."""
        found = self.store.list(self._prefix(model, recipient), recursive=True)
        return {self.store.relative(f.path) for f in found if f.type == pafs.FileType.File and f.path.endswith(".parquet")}

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The newest manifest, checked against the files: manifests or data files deleted mean a re-sync."""
        manifest = self.log.newest(model.model_name, recipient.id)
        where = f"prefix {self.store.uri(self._prefix(model, recipient))}"
        stamp = self.owner(model, recipient)
        # A snapshot (``compact``) carries the last transfer's record: a move is undone only by a transfer.
        moved = stamp.moved_reason(manifest["transfer_record"]["transfer_id"] if manifest else None) if stamp else None
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

    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
        removals: Removals | None = None,
        new_keys: bool = False,  # an upsert here costs what an append would
    ) -> dict[str, object]:
        with self.log.lock(model.model_name, recipient.id):
            current = self.read_state(model=model, recipient=recipient)
            if current.version != expected.version:
                now = current.last_transfer.transfer_id if current.last_transfer else None
                was = expected.last_transfer.transfer_id if expected.last_transfer else None
                raise lost_lease(model=model.model_name, recipient=recipient.id, where=self.root, read=was, now=now)
            previous = reader_schema(self.log, self.store, model.model_name, recipient.id)
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
                    write_stamp(self.store, me, previous=None, reason=f"first transfer {record.transfer_id}")
                return {**self._publish(model=model, recipient=recipient, batch=batch, record=record,
                                        sequence=int(expected.version or 0) + 1, reader_schema=combined,
                                        schema_metadata=metadata, removals=removals), OWNER_KEY: recipient.id}
            except OSError as exc:
                raise PublishError(
                    f"model {model.model_name}, recipient {recipient.id}: writing to {self.root} failed and no manifest "
                    f"was written, so readers see nothing of this transfer: {exc}"
                ) from exc

    def _live_files(self, model: ModelConfig, recipient: RecipientConfig, newest: dict) -> list[str]:
        """The data files a reader of (model, recipient) reads: the newest manifest's, plus those the
        pointer lists for the manifests since the last full refresh (rebuilt from the manifests when the
        pointer is behind, after a crash, or was written before it kept the list)."""
        keys = [f["data_file_key"] for f in newest["files"]]
        if newest["transfer_type"] == FULL_REFRESH:
            return keys
        hint = self.log.load(self.log.pointer(model.model_name, recipient.id)) or {}
        if hint.get("sequence") == newest["sequence"] and "live_files" in hint:
            return hint["live_files"]
        if hint.get("sequence") == newest["sequence"] - 1 and "live_files" in hint:
            return hint["live_files"] + keys
        manifests = committed_manifests(self.store, model.model_name, recipient.id, private=self.config.disable_manifest)
        return [f["data_file_key"] for m in manifests for f in m["files"]]

    def _where(self, model: ModelConfig, recipient: RecipientConfig) -> str:
        return f"object-storage prefix {self.store.uri(self._prefix(model, recipient))} (destination {self.name})"

    def owner(self, model: ModelConfig, recipient: RecipientConfig) -> Owner | None:
        return read_stamp(self.store, model.model_name, recipient.id)

    def maintain(self, models: list[ModelConfig], *, compact: bool, dry_run: bool,
                 now: datetime | None = None) -> list[Maintained]:
        """Per recipient prefix: a snapshot manifest of its live rows, then vacuum past ``retention_hours``
        (``object_storage.compact``); then the janitor's pass over the prefix (files no manifest lists)."""
        from incsync.destinations.object_storage.compact import maintain_model
        from incsync.destinations.object_storage.janitor import janitor

        done = []
        for model in models:
            if self.config.disable_manifest:
                done.append(Maintained(destination=self.name, table=self.store.uri(model.model_name), skipped=(
                    "disable_manifest: readers read every file under the prefix, so no snapshot can stand for older "
                    "files; only the janitor runs")))
                continue
            done += maintain_model(self, model, compact=compact, dry_run=dry_run, now=now or datetime.now(timezone.utc))
        removed = janitor(self.store, dry_run=dry_run)
        if removed:
            done.append(Maintained(destination=self.name, table=f"{self.root} (files no manifest lists)",
                                   files_vacuumed=len(removed), dry_run=dry_run))
        return done

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with self.log.lock(model.model_name, recipient.id):
            previous = self.owner(model, recipient)
            last = self.log.newest(model.model_name, recipient.id)
            new = replace(owner_of(model, recipient), moved=last["transfer_record"]["transfer_id"] if last else "")
            write_stamp(self.store, new, previous=previous, reason=reason)
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
            entry = {"sha256_checksum": sha256_checksum(source, str(staged)),
                     "row_count": pq.read_metadata(str(staged), filesystem=source).num_rows}
            self.store.put_file(source, str(staged), target, move=True)
            files.append({"data_file_key": target, **entry})
        crash_point("mid_publish")
        key = self.log.key(model.model_name, date, record.transfer_id)
        manifest = new_manifest(
            store=self.store, key=key, model=model.model_name, recipient=recipient.id, record=record, sequence=sequence,
            files=files, schema=batch.schema, reader_schema=reader_schema, schema_metadata=schema_metadata, deletes=deletes,
        )
        if self.config.signing_key_env:
            from incsync.destinations.object_storage.signing import load_private_key, sign_manifest

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
        entry = {"data_file_key": target, "sha256_checksum": sha256_checksum(self.store.fs, self.store.path(target)),
                 "row_count": keys.num_rows}
        mode = removals.mode if removals is not None else "hard"
        return {"delete_files": [entry], "delete_mode": mode,
                "deleted_at": removals.at.isoformat() if removals is not None and removals.at else None,
                "replaced_rows": batch.rows if record.transfer_type == REPAIR else 0,
                "removed_rows": removals.rows if removals is not None else 0}


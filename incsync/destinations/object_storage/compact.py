"""Keeping an object-storage prefix bounded (docs/design.md#maintenance): a snapshot manifest per
recipient, then vacuum.

- **Snapshot** (``compact: true``): a recipient's live rows — what a reader of its manifests gets, each
  key's newest row, repairs and removals applied — rewritten into few Parquet files of the destination's
  ``target_file_size`` and committed by one more manifest, exactly as a transfer commits: files first,
  then a write-once manifest (signed when the destination signs), then the pointer. The manifest is a
  ``FULL_REFRESH`` one, so every reader — ``read_manifested`` and any reader following the documented
  recipe ("from the newest FULL_REFRESH manifest on") — starts from it and replays nothing older. It
  takes the next ``sequence``, carries the last transfer's ``transfer_record`` unchanged (state, high
  watermark and ownership read the same) and a ``snapshot`` entry saying what it compacted; the next
  transfer's manifest continues after it. Older manifests and their files are left as they are.
- **Vacuum**: the manifests a ``FULL_REFRESH`` manifest (snapshot or full refresh) superseded more than
  ``retention_hours`` ago, and the files only they list, are deleted — manifests first, so a crash leaves
  only unlisted files, which the janitor removes. A reader that listed the manifests less than the
  retention ago (``read_manifested(version=...)`` of any version since) never finds a file gone.

Before compacting, each live file's sha256 is checked against its manifest (and each manifest's
signature when the destination signs), so a file changed after publishing is never re-published.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from incsync.config.model import ModelConfig
from incsync.destinations.base import FULL_REFRESH, TransferRecord
from incsync.destinations.errors import ManifestIntegrityError
from incsync.destinations.maintenance import Maintained
from incsync.destinations.object_storage.manifests import live_manifests, new_manifest, schema_from_text, sha256_checksum
from incsync.destinations.object_storage.reader import latest_versions, read_manifests

if TYPE_CHECKING:
    from incsync.destinations.object_storage.destination import ObjectStorageDestination

SNAPSHOT = "snapshot"  # the manifest entry that marks (and describes) a maintenance snapshot


def maintain_model(
    dest: ObjectStorageDestination, model: ModelConfig, *, compact: bool, dry_run: bool, now: datetime,
) -> list[Maintained]:
    """One pass over each recipient of ``model`` that has manifests under the prefix."""
    by_recipient: dict[str, list[dict]] = defaultdict(list)
    for m in dest.log.all(model.model_name):
        by_recipient[m["recipient"]].append(m)
    done = []
    for recipient in sorted(by_recipient):
        with dest.log.lock(model.model_name, recipient):
            mine = sorted(by_recipient[recipient], key=lambda m: m["sequence"])
            newest = dest.log.newest(model.model_name, recipient)
            if newest is not None and newest["sequence"] != mine[-1]["sequence"]:  # published since the listing
                mine = sorted((m for m in dest.log.all(model.model_name) if m["recipient"] == recipient),
                              key=lambda m: m["sequence"])
            done.append(_maintain(dest, model, recipient, mine, compact=compact, dry_run=dry_run, now=now))
    return done


def _maintain(
    dest: ObjectStorageDestination, model: ModelConfig, recipient: str, mine: list[dict], *, compact: bool,
    dry_run: bool, now: datetime,
) -> Maintained:
    store = dest.store
    folder = f"{model.model_name}/recipient={recipient}"
    before = _sizes(dest, folder)
    live = live_manifests(mine)
    compacting = compact and len(live) > 1 and any(m["files"] for m in live)
    cutoff = now - timedelta(hours=dest.config.retention_hours)
    base = {"destination": dest.name, "table": store.uri(folder), "files_before": len(before),
            "bytes_stored_before": sum(before.values())}
    if dry_run:  # vacuum as it would run after the snapshot
        planned = {"sequence": mine[-1]["sequence"] + 1, "transfer_type": FULL_REFRESH, "end_time": now.isoformat(), "files": []}
        _, doomed = _vacuumable([*mine, planned] if compacting else mine, cutoff)
        return Maintained(**base, files_after=len(before), files_compacted=len(set(_files(live))) if compacting else 0,
                          files_vacuumed=len(doomed), bytes_live=sum(before.get(k, 0) for k in _files(live)),
                          bytes_stored_after=sum(before.values()), dry_run=True)
    compacted = 0
    if compacting:
        try:
            mine.append(write_snapshot(dest, model, recipient, live, sizes=before, now=now))
        except (ManifestIntegrityError, SnapshotRaced) as exc:
            return Maintained(**base, files_after=len(before), bytes_live=sum(before.get(k, 0) for k in _files(live)),
                              bytes_stored_after=sum(before.values()), skipped=str(exc))
        compacted = len(set(_files(live)))
    manifests, doomed = _vacuumable(mine, cutoff)
    for m in manifests:
        store.delete(m["manifest_file_key"])
    for key in doomed:
        store.delete(key)  # one already gone is no error
    after = _sizes(dest, folder)  # vacuum never touches what the live manifests (from the newest start) list
    return Maintained(**base, files_after=len(after), files_compacted=compacted, files_vacuumed=len(doomed),
                      bytes_live=sum(after.get(k, 0) for k in _files(live_manifests(mine))),
                      bytes_stored_after=sum(after.values()))


class SnapshotRaced(Exception):
    """A transfer published while the snapshot was written: the snapshot is not committed."""


def write_snapshot(
    dest: ObjectStorageDestination, model: ModelConfig, recipient: str, live: list[dict], *, sizes: dict[str, int],
    now: datetime,
) -> dict:
    """Commit the snapshot of ``live`` (the manifests a reader applies now) and return its manifest."""
    store = dest.store
    _check(dest, live)
    raw_rows = sum(f.get("row_count", 0) for m in live for f in m["files"])
    table = latest_versions(read_manifests(store, live), list(model.primary_key), model.last_modified_column)
    last = live[-1]
    snapshot_id = f"{last['transfer_id'][:16]}-snapshot-{uuid.uuid4().hex[:12]}"  # sorts right after `last`
    folder = f"{model.model_name}/recipient={recipient}/dt={last['dt']}"
    per_row = max(sum(sizes.get(k, 0) for m in live for k in (f["data_file_key"] for f in m["files"])) / max(raw_rows, 1), 1.0)
    rows_per_file = max(1, int(dest.config.target_file_size / per_row))
    store.mkdir(folder)
    files = []
    for n, offset in enumerate(range(0, max(table.num_rows, 1), rows_per_file)):
        target = f"{folder}/{snapshot_id}-{n:05d}.parquet"
        pq.write_table(table.slice(offset, rows_per_file), store.path(target), filesystem=store.fs)
        files.append({"data_file_key": target, "sha256_checksum": sha256_checksum(store.fs, store.path(target)),
                      "row_count": min(rows_per_file, table.num_rows - offset)})
    record = TransferRecord(**last["transfer_record"])
    as_snapshot = replace(record, transfer_id=snapshot_id, transfer_type=FULL_REFRESH, rows_transferred=table.num_rows,
                          delta_rows_transferred=0, extra={})
    key = dest.log.key(model.model_name, last["dt"], snapshot_id)
    reader_schema = schema_from_text(last["reader_schema"]) if "reader_schema" in last else table.schema
    manifest = new_manifest(store=store, key=key, model=model.model_name, recipient=recipient, record=as_snapshot,
                            sequence=last["sequence"] + 1, files=files, schema=table.schema, reader_schema=reader_schema,
                            schema_metadata={}, deletes={})
    manifest.update({"start_time": now.isoformat(), "end_time": now.isoformat(), "transfer_record": last["transfer_record"],
                     SNAPSHOT: {"of_sequence": last["sequence"], "from_sequence": live[0]["sequence"],
                                "manifests": len(live), "files_compacted": len(set(_files(live))), "rows_read": raw_rows}})
    if dest.config.signing_key_env:
        from incsync.destinations.object_storage.signing import load_private_key, sign_manifest

        manifest = sign_manifest(manifest, load_private_key(dest.config.signing_key_env, destination=dest.name))
    newest = dest.log.newest(model.model_name, recipient)
    if newest is None or newest["sequence"] != last["sequence"]:
        for f in files:
            store.delete(f["data_file_key"])
        raise SnapshotRaced(f"a transfer published manifest sequence {newest['sequence'] if newest else '?'} during the "
                            "snapshot, which was not committed and is written again next time")
    store.write_once(key, json.dumps(manifest, indent=1, sort_keys=True))  # the commit point, as a transfer's
    pointer = {"manifest_file_key": key, "sequence": manifest["sequence"], "transfer_id": snapshot_id,
               "live_files": [f["data_file_key"] for f in files]}
    store.write(dest.log.pointer(model.model_name, recipient), json.dumps(pointer))
    return manifest


def _check(dest: ObjectStorageDestination, live: list[dict]) -> None:
    """Refuse to re-publish a changed file or manifest: each file's sha256 (and signature) as published."""
    if dest.config.signing_key_env:
        from incsync.destinations.object_storage.signing import load_private_key, public_key_text, verify_manifest

        public = public_key_text(load_private_key(dest.config.signing_key_env, destination=dest.name))
        for m in live:
            verify_manifest(m, public, store=dest.store)
        return
    for m in live:
        for entry in [*m["files"], *m.get("delete_files", [])]:
            digest = dest.store.sha256(entry["data_file_key"])
            if digest != entry["sha256_checksum"]:
                raise ManifestIntegrityError(
                    f"data file {entry['data_file_key']} of manifest {m['manifest_file_key']}: sha256 {digest} differs "
                    f"from the published {entry['sha256_checksum']}: it was changed after publishing, so no snapshot "
                    "is written of it; repair the recipient (`incsync repair`) or run a full refresh"
                )


def _vacuumable(mine: list[dict], cutoff: datetime) -> tuple[list[dict], list[str]]:
    """The manifests a FULL_REFRESH manifest committed before ``cutoff`` superseded, and the files only they list."""
    starts = [m["sequence"] for m in mine if m["transfer_type"] == FULL_REFRESH and _committed(m) <= cutoff]
    if not starts:
        return [], []
    edge = max(starts)
    doomed = [m for m in mine if m["sequence"] < edge]
    kept = {k for m in mine if m["sequence"] >= edge for k in _files([m], deletes=True)}
    return doomed, sorted(set(_files(doomed, deletes=True)) - kept)


def _committed(manifest: dict) -> datetime:
    at = datetime.fromisoformat(manifest["end_time"])
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _files(manifests: list[dict], *, deletes: bool = False) -> list[str]:
    return [f["data_file_key"] for m in manifests for f in [*m["files"], *(m.get("delete_files", []) if deletes else [])]]


def _sizes(dest: ObjectStorageDestination, folder: str) -> dict[str, int]:
    """The recipient folder's data files and their sizes, in one listing."""
    found = dest.store.list(folder, recursive=True)
    return {dest.store.relative(f.path): f.size or 0 for f in found
            if f.type == pafs.FileType.File and f.path.endswith(".parquet")}

"""``incsync maintain`` on an Iceberg table: compaction into fewer files, expiry of old snapshots, and
removal of the files no remaining snapshot reads.

Compaction rewrites every data file of the current snapshot into new ones (one snapshot, no row changes,
the transfer record untouched in the table properties) when there is more than one file. Expiry drops
snapshots older than ``retention_hours`` from the metadata (the current one always stays). pyiceberg 0.12
deletes no file, so ``vacuum`` does what Spark's ``expire_snapshots`` + ``remove_orphan_files`` do: it lists
the table's folder and deletes each data file (``.parquet``) and manifest or manifest list (``.avro``) that no
remaining snapshot reads and that was written before the retention's cutoff — what expired snapshots read,
and what a publish killed before its commit left behind. A file written inside the retention stays even
when nothing reads it yet: a publish of another process may be about to commit it. Metadata files
(``.metadata.json``) stay: they are small, and each one a reader of an older version opens.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from incsync.destinations.maintenance import Maintained
from incsync.storage.files import Store

if TYPE_CHECKING:
    from pyiceberg.table import Table


def _files(table: Table) -> list:
    return [task.file for task in table.scan().plan_files()] if table.current_snapshot() else []


def _stored(store: Store) -> dict[str, tuple[int, float]]:
    """Each data and manifest file under the table's folder: its key, size and time of writing."""
    found = {}
    for info in store.list(recursive=True):
        if info.type.name == "File" and info.path.endswith((".parquet", ".avro")):
            found[store.relative(info.path)] = (info.size or 0, info.mtime.timestamp() if info.mtime else 0.0)
    return found


def _read_by_snapshots(table: Table, store: Store) -> set[str]:
    """The keys (relative to the table's folder) of every file a remaining snapshot reads."""
    io, keys = table.io, set()

    def key(path: str) -> str:
        return store.relative(_on_fs(path))

    for snapshot in table.metadata.snapshots:
        keys.add(key(snapshot.manifest_list))
        for manifest in snapshot.manifests(io):
            keys.add(key(manifest.manifest_path))
            keys.update(key(entry.data_file.file_path) for entry in manifest.fetch_manifest_entry(io, discard_deleted=True))
    return keys


def _on_fs(url: str) -> str:
    """A file's URL as its path on the table's filesystem: ``bucket/key`` on an object store, the local path
    of a ``file://`` URL."""
    return url.split("://", 1)[1] if "://" in url else url


def vacuum(table: Table, store: Store, *, cutoff: float, dry_run: bool) -> tuple[int, int]:
    """Delete the files no remaining snapshot reads, written before ``cutoff``; (files, bytes) deleted."""
    read = _read_by_snapshots(table, store)
    doomed = {k: size for k, (size, written) in _stored(store).items() if k not in read and written < cutoff}
    if not dry_run:
        for k in doomed:
            store.delete(k)
    return len(doomed), sum(doomed.values())


def maintain_table(table: Table, *, destination: str, name: str, retention_hours: int, compact: bool, dry_run: bool,
                   store: Store) -> Maintained:
    from incsync.destinations.iceberg.files import arrow_schema, commit_snapshot

    before = _files(table)
    live = sum(f.file_size_in_bytes for f in before)
    stored_before = sum(size for size, _ in _stored(store).values())
    cutoff = datetime.now(timezone.utc) - timedelta(hours=retention_hours)
    if dry_run:
        doomed, _ = vacuum(table, store, cutoff=cutoff.timestamp(), dry_run=True)
        return Maintained(destination=destination, table=name, files_before=len(before), files_after=len(before),
                          files_compacted=len(before) if compact and len(before) > 1 else 0, files_vacuumed=doomed,
                          bytes_live=live, bytes_stored_before=stored_before, bytes_stored_after=stored_before, dry_run=True)
    compacted = 0
    if compact and len(before) > 1:
        rows = table.scan().to_arrow().cast(arrow_schema(table.schema()))
        tx = table.transaction()
        commit_snapshot(tx, rows=rows, drop=before, summary={"incsync.maintenance": "compaction"})
        table = tx.commit_transaction()
        compacted = len(before)
    table.maintenance.expire_snapshots().older_than(cutoff).commit()
    table = table.refresh()
    vacuumed, _ = vacuum(table, store, cutoff=cutoff.timestamp(), dry_run=False)
    after = _files(table)
    return Maintained(destination=destination, table=name, files_before=len(before), files_after=len(after),
                      files_compacted=compacted, files_vacuumed=vacuumed,
                      bytes_live=sum(f.file_size_in_bytes for f in after), bytes_stored_before=stored_before,
                      bytes_stored_after=sum(size for size, _ in _stored(store).values()))

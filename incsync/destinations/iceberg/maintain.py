"""``incsync maintain`` on an Iceberg table: compaction into fewer files, and expiry of old snapshots.

Compaction rewrites every data file of the current snapshot into new ones (one snapshot, no row changes,
the transfer record untouched in the table properties) when there is more than one file. Expiry drops
snapshots older than ``retention_hours`` from the metadata (the current one always stays); pyiceberg 0.12
deletes no files, so the data files only expired snapshots read stay in storage until an engine's
orphan-file removal (Spark's ``remove_orphan_files``) runs — ``files_vacuumed`` is 0 and says so.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from incsync.destinations.maintenance import Maintained


def _files(table) -> list:
    return [task.file for task in table.scan().plan_files()] if table.current_snapshot() else []


def maintain_table(table, *, destination: str, name: str, retention_hours: int, compact: bool, dry_run: bool) -> Maintained:
    from incsync.destinations.iceberg.files import arrow_schema, commit_snapshot

    before = _files(table)
    live = sum(f.file_size_in_bytes for f in before)
    if dry_run:
        return Maintained(destination=destination, table=name, files_before=len(before), files_after=len(before),
                          files_compacted=len(before) if compact and len(before) > 1 else 0, bytes_live=live,
                          bytes_stored_before=live, bytes_stored_after=live, dry_run=True)
    compacted = 0
    if compact and len(before) > 1:
        rows = table.scan().to_arrow().cast(arrow_schema(table.schema()))
        tx = table.transaction()
        commit_snapshot(tx, rows=rows, drop=before, summary={"incsync.maintenance": "compaction"})
        table = tx.commit_transaction()
        compacted = len(before)
    cutoff = datetime.now(timezone.utc) - timedelta(hours=retention_hours)
    table.maintenance.expire_snapshots().older_than(cutoff).commit()
    after = _files(table)
    stored = sum(f.file_size_in_bytes for f in after)
    return Maintained(destination=destination, table=name, files_before=len(before), files_after=len(after),
                      files_compacted=compacted, files_vacuumed=0, bytes_live=stored, bytes_stored_before=live,
                      bytes_stored_after=stored)

"""Keeping a Delta table's storage bounded (docs/design.md#maintenance): compaction, vacuum past the
retention, a checkpoint.

- **Compaction** rewrites the small files frequent syncs leave (each MERGE adds one or a few) into files
  of the table's ``delta.targetFileSize``. delta-rs bins neighbouring files and keeps their order, so
  the backfill's layout by primary key survives: a later MERGE of recent keys still rewrites few files.
  It commits like any writer; a transfer that commits first makes it fail (it then waits for the next
  pass), and it carries no transfer record, so each recipient's state is untouched.
- **Vacuum** deletes the files no version inside the retention reads: those a later commit removed more
  than ``retention_hours`` ago. A reader of any younger version never fails. Only files the log removed
  are considered ("lite" vacuum): a file a transfer is writing right now is never touched.
- **A checkpoint** at the new version, then delta-rs's log cleanup, which keeps ``delta.logRetentionDuration``
  (30 days): transfer records older than that are rebuilt from the application transactions
  (``delta.state``), which every checkpoint keeps.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from incsync.destinations.maintenance import Maintained, stored_bytes

MAINTENANCE_KEY = "incsync.maintenance"


def maintain_table(
    dt: DeltaTable, *, destination: str, path: str, storage_options: dict[str, str] | None, target_file_size: int,
    retention_hours: int, compact: bool, dry_run: bool,
) -> Maintained:
    """One pass over the table ``dt`` (loaded at its newest version); ``dry_run`` changes nothing."""
    before = file_sizes(dt)
    stored_before = stored_bytes(path, storage_options)
    small = sum(1 for size in before.values() if size < target_file_size)
    if dry_run:
        doomed = dt.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False)
        return Maintained(destination=destination, table=path, files_before=len(before), files_after=len(before),
                          files_compacted=small if compact else 0, files_vacuumed=len(doomed),
                          bytes_live=sum(before.values()), bytes_stored_before=stored_before,
                          bytes_stored_after=stored_before, dry_run=True)
    compacted = 0
    if compact and small > 1:
        props = CommitProperties(custom_metadata={MAINTENANCE_KEY: json.dumps(
            {"operation": "compact", "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})})
        try:
            metrics = dt.optimize.compact(target_size=target_file_size, commit_properties=props)
        except CommitFailedError as exc:
            return Maintained(destination=destination, table=path, files_before=len(before), files_after=len(before),
                              bytes_live=sum(before.values()), bytes_stored_before=stored_before,
                              bytes_stored_after=stored_before,
                              skipped=f"a transfer committed during the compaction, which changed nothing and runs "
                                      f"again next time ({str(exc).strip()[:200]})")
        compacted = int(metrics.get("numFilesRemoved", 0))
    vacuumed = dt.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    after = file_sizes(dt)
    return Maintained(destination=destination, table=path, files_before=len(before), files_after=len(after),
                      files_compacted=compacted, files_vacuumed=len(vacuumed), bytes_live=sum(after.values()),
                      bytes_stored_before=stored_before, bytes_stored_after=stored_bytes(path, storage_options),
                      checkpoint_version=dt.version())


def file_sizes(dt: DeltaTable) -> dict[str, int]:
    """The data files of the version ``dt`` is loaded at, and their sizes."""
    actions = pa.table(dt.get_add_actions(flatten=False)).select(["path", "size_bytes"]).to_pydict()
    return dict(zip(actions["path"], actions["size_bytes"], strict=True))


def rewritten(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What a commit took out of the table and put in (``file_sizes`` before and after it): the metadata
    that shows whether an incremental's rewrite followed its change."""
    removed, added = before.keys() - after.keys(), after.keys() - before.keys()
    return {"delta_files_removed": len(removed), "delta_bytes_removed": sum(before[f] for f in removed),
            "delta_files_added": len(added), "delta_bytes_added": sum(after[f] for f in added)}

"""A shared Iceberg table as its reader sees it: its metadata with every location moved into the storage
endpoint's bucket and incsync's own properties left out, and its data files planned on the server.

The table's manifests name its files by their paths on this machine, which no remote reader can open, so the
catalog plans scans itself (the spec's ``planTableScan``) and hands out each data file's location in the
bucket; the manifests never leave the server.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from incsync.destinations.ownership import OWNER_PROPERTY, Owner
from incsync.sharing.iceberg.api import RestError, bad_request
from incsync.storage.names import is_url, local_path

log = logging.getLogger(__name__)

PRIVATE_PREFIX = "incsync."  # incsync's own table properties and snapshot summary keys (the owner stamp holds a tenant value)


def unservable(what: str) -> RestError:
    log.error("an Iceberg table cannot be served: %s", what)
    return RestError(500, "ServiceFailureException", "The table cannot be served; the provider's log says why.")


def read(metadata_location: str) -> dict[str, Any]:
    """A metadata file on this machine, gzip-compressed or not."""
    if is_url(metadata_location):
        raise unservable(f"its metadata is not on this machine ({metadata_location.split('://')[0]}://)")
    raw = Path(local_path(metadata_location)).read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return data


def owner(metadata: dict[str, Any]) -> str | None:
    """The recipient the table is stamped for (docs/design.md#ownership)."""
    stamped = (metadata.get("properties") or {}).get(OWNER_PROPERTY)
    return Owner.from_json(stamped).recipient if stamped else None


@dataclass(frozen=True)
class Placement:
    """Where a table's files are here (``root``) and where its reader finds them (``prefix``, in the bucket)."""

    root: str
    prefix: str

    @classmethod
    def of(cls, metadata: dict[str, Any], prefix: str) -> Placement:
        location = str(metadata.get("location", ""))
        if not location or is_url(location):
            raise unservable("its location is not a folder on this machine")
        return cls(root=os.path.normpath(local_path(location)), prefix=prefix)

    def relative(self, location: str) -> str | None:
        """``location`` relative to the table's folder; None for anything outside it."""
        if is_url(location):
            return None
        path = os.path.normpath(local_path(location))
        return path[len(self.root) + 1:] if path.startswith(self.root + os.sep) else None

    def moved(self, location: str) -> str:
        rel = self.relative(location)
        if rel is None:
            raise unservable(f"a file lies outside the table's folder {self.root}")
        return f"{self.prefix}/{rel}"


def _public(values: dict[str, str], placement: Placement) -> dict[str, str]:
    """Properties or a summary without incsync's keys or paths of this machine."""
    return {k: v for k, v in values.items()
            if not k.startswith(PRIVATE_PREFIX) and not (isinstance(v, str) and (v.startswith("file:") or placement.root in v))}


def for_reader(metadata: dict[str, Any], placement: Placement, *, refs_only: bool = False) -> dict[str, Any]:
    """The metadata a reader receives: every location in the bucket, incsync's keys left out; with ``refs_only``,
    only the snapshots a branch or tag points to (the spec's ``snapshots=refs``)."""
    out = dict(metadata)
    out["location"] = placement.prefix
    out["properties"] = _public(metadata.get("properties") or {}, placement)
    referenced = {ref.get("snapshot-id") for ref in (metadata.get("refs") or {}).values()}
    snapshots = []
    for snapshot in metadata.get("snapshots") or []:
        if refs_only and snapshot.get("snapshot-id") not in referenced:
            continue
        moved = {**snapshot, "summary": {k: v for k, v in (snapshot.get("summary") or {}).items()
                                         if not k.startswith(PRIVATE_PREFIX)}}
        if "manifest-list" in snapshot:
            moved["manifest-list"] = placement.moved(snapshot["manifest-list"])
        if "manifests" in snapshot:
            moved["manifests"] = [placement.moved(m) for m in snapshot["manifests"]]
        snapshots.append(moved)
    out["snapshots"] = snapshots
    out["metadata-log"] = [{**entry, "metadata-file": placement.moved(entry["metadata-file"])}
                           for entry in metadata.get("metadata-log") or [] if placement.relative(entry["metadata-file"])]
    for key in ("statistics", "partition-statistics"):
        if key in metadata:
            out[key] = [{**s, "statistics-path": placement.moved(s["statistics-path"])} for s in metadata[key] or []]
    return out


def _value(value: Any) -> Any:
    """A partition value as JSON carries it: Iceberg's own single-value form (days, microseconds, ...)."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def plan(metadata_location: str, placement: Placement, *, snapshot_id: int | None,
         residual: dict[str, Any] | bool | None) -> list[dict[str, Any]]:
    """The file scan tasks of a snapshot (None: the current one): every data file, each with ``residual`` (the
    scan's filter, which the reader applies; the server prunes nothing)."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    if snapshot_id is not None and table.metadata.snapshot_by_id(snapshot_id) is None:
        raise bad_request(f"snapshot {snapshot_id} is not a snapshot of the table, or no longer kept")
    tasks = []
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        if task.delete_files:
            raise unservable("a snapshot holds delete files, which name data files by their paths here")
        f = task.file
        partition = [_value(f.partition[i]) for i in range(len(f.partition))]
        data_file: dict[str, Any] = {"spec-id": f.spec_id, "partition": partition, "content": "data",
                     "file-path": placement.moved(f.file_path), "file-format": f.file_format.value.lower(),
                     "file-size-in-bytes": f.file_size_in_bytes, "record-count": f.record_count}
        task_json: dict[str, Any] = {"data-file": data_file}
        if residual is not None:
            task_json["residual-filter"] = residual
        tasks.append(task_json)
    return tasks

"""A shared Iceberg table as its reader sees it: its metadata with every location moved into the storage
endpoint's bucket and incsync's own properties left out, and its data files planned on the server.

A table's folder is on this machine or on S3 (read with its destination's storage options). Its manifests name
its files by their paths there, which a reader cannot open (a path here) or must not (the provider's bucket), so the
catalog plans scans itself (the spec's ``planTableScan``) and hands out each data file's location in the
bucket; the manifests never leave the server.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from incsync.destinations.ownership import OWNER_PROPERTY, Owner
from incsync.sharing.iceberg.api import RestError, bad_request
from incsync.storage.filesystems import filesystem, pyiceberg_properties
from incsync.storage.names import is_url, local_path, scheme_of

log = logging.getLogger(__name__)

PRIVATE_PREFIX = "incsync."  # incsync's own table properties and snapshot summary keys (the owner stamp holds a tenant value)


def unservable(what: str) -> RestError:
    log.error("an Iceberg table cannot be served: %s", what)
    return RestError(500, "ServiceFailureException", "The table cannot be served; the provider's log says why.")


def _url(location: str) -> str:
    """An object-storage location as pyiceberg writes it (``s3a://`` is ``s3://`` to it)."""
    return location.replace("s3a://", "s3://", 1).rstrip("/")


def read(metadata_location: str, options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A metadata file, gzip-compressed or not: on this machine, or on S3 read with the table's ``options``."""
    if is_url(metadata_location) and not metadata_location.startswith("file:"):
        if scheme_of(metadata_location) != "s3":
            raise unservable(f"its metadata is on storage this server does not read ({metadata_location.split('://')[0]}://)")
        fs, path = filesystem(_url(metadata_location), options)
        with fs.open_input_stream(path) as stream:
            raw = stream.read()
    else:
        raw = Path(local_path(metadata_location)).read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return data


def owner(metadata: dict[str, Any]) -> str | None:
    """The recipient the table is stamped for (docs/design.md#ownership)."""
    stamped = (metadata.get("properties") or {}).get(OWNER_PROPERTY)
    return Owner.from_json(stamped).recipient if stamped else None


@dataclass(frozen=True)
class Placement:
    """Where a table's files are (``root``: a folder here or an ``s3://`` URL) and where its reader finds them
    (``prefix``, in the endpoint's bucket)."""

    root: str
    prefix: str

    @property
    def remote(self) -> bool:
        return is_url(self.root)

    @classmethod
    def of(cls, metadata: dict[str, Any], prefix: str) -> Placement:
        location = str(metadata.get("location", ""))
        if location and is_url(location) and not location.startswith("file:"):
            if scheme_of(location) != "s3":
                raise unservable("its location is neither a folder on this machine nor on S3")
            return cls(root=_url(location), prefix=prefix)
        if not location:
            raise unservable("its metadata names no location")
        return cls(root=os.path.normpath(local_path(location)), prefix=prefix)

    def relative(self, location: str) -> str | None:
        """``location`` relative to the table's folder; None for anything outside it."""
        if self.remote:
            if not is_url(location) or location.startswith("file:"):
                return None
            url = _url(location)
            rel = url[len(self.root) + 1:] if url.startswith(self.root + "/") else ""
            return rel if rel and not unsafe_key(rel) else None
        if is_url(location) and not location.startswith("file:"):
            return None
        path = os.path.normpath(local_path(location))
        return path[len(self.root) + 1:] if path.startswith(self.root + os.sep) else None

    def moved(self, location: str) -> str:
        rel = self.relative(location)
        if rel is None:
            raise unservable(f"a file lies outside the table's folder {self.root}")
        return f"{self.prefix}/{rel}"


def unsafe_key(rel: str) -> bool:
    """Whether a key relative to a table's folder on S3 could step out of it or name it in two ways."""
    return any(part in ("", ".", "..") for part in rel.split("/")) or "\\" in rel


def _public(values: dict[str, str], placement: Placement) -> dict[str, str]:
    """Properties or a summary without incsync's keys or paths of this machine."""
    return {k: v for k, v in values.items()
            if not k.startswith(PRIVATE_PREFIX)
            and not (isinstance(v, str) and (v.startswith(("file:", "s3:", "s3a:")) or placement.root in v))}


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
         residual: dict[str, Any] | bool | None, options: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The file scan tasks of a snapshot (None: the current one): every data file, each with ``residual`` (the
    scan's filter, which the reader applies; the server prunes nothing). ``options``: the storage options
    reading a table on S3."""
    from pyiceberg.table import StaticTable

    location = _url(metadata_location) if placement.remote else metadata_location
    table = StaticTable.from_metadata(location, properties=pyiceberg_properties(options) if placement.remote else {})
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

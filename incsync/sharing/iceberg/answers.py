"""The catalog's answers: configuration, namespaces, tables, loading a table with its storage credentials, and
planning a scan. A recipient's catalog is its share: prefix and warehouse are the share's name, namespaces
its schemas, tables its Iceberg tables; anything else, someone else's or nobody's, is one and the same 404.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from incsync.sharing.audit import Read
from incsync.sharing.catalog import ICEBERG, RecipientShare, SharedTable
from incsync.sharing.iceberg import metadata
from incsync.sharing.iceberg.api import RestError, bad_request, no_such_namespace, no_such_table, page, unauthenticated
from incsync.sharing.iceberg.credentials import CredentialVendor, TableGrant, table_prefix
from incsync.sharing.iceberg.metadata import Placement
from incsync.sharing.protocol import Caller, ProtocolError
from incsync.sharing.service import SharingService
from incsync.storage.filesystems import filesystem
from incsync.storage.names import is_url

# The routes this catalog serves, as the config answer lists them; every other one is refused or unknown.
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan",
]
# Readers must plan on the server: a table's manifests name files by their paths on the provider's machine.
SERVER_PLANNING = {"scan-planning-mode": "server"}


@dataclass(frozen=True)
class StoredObject:
    """A data file of a table on S3: read from the provider's bucket with its destination's storage options."""

    fs: pafs.FileSystem
    path: str
    size: int
    mtime: datetime | None

    def read(self, start: int, length: int, chunk: int = 1 << 20) -> Iterator[bytes]:
        """``length`` bytes from ``start``, in chunks."""
        with self.fs.open_input_file(self.path) as stream:
            stream.seek(start)
            while length > 0:
                data = stream.read(min(chunk, length))
                if not data:
                    return
                length -= len(data)
                yield data


@dataclass(frozen=True)
class Loaded:
    """A table of the caller's share at one metadata file."""

    table: SharedTable
    location: str
    metadata: dict[str, Any]
    placement: Placement


class IcebergService:
    """The catalog's answers over the sharing service's catalog, tokens and clock."""

    def __init__(self, service: SharingService, vendor: CredentialVendor) -> None:
        self.service = service
        self.vendor = vendor
        self._roots: dict[SharedTable, str] = {}  # a table's folder never moves; its metadata file does
        # A table on S3: its filesystem, its folder on it and the storage options it was made with
        self._buckets: dict[SharedTable, tuple[pafs.FileSystem, str, dict[str, str] | None]] = {}

    def caller(self, authorization: str | None) -> Caller:
        try:
            return self.service.caller(authorization)
        except ProtocolError:
            raise unauthenticated() from None

    def share(self, caller: Caller, prefix: str | None) -> RecipientShare:
        """The caller's catalog (empty when none of its tables is an Iceberg table); ``prefix``: its name, or a 404."""
        share = self.service.catalogs().share_of(caller.recipient, ICEBERG)
        share = share or RecipientShare(name=caller.recipient, recipient=caller.recipient, tables=())
        if prefix is not None and share.name.casefold() != prefix.casefold():
            raise no_such_namespace()
        return share

    def config(self, caller: Caller, params: dict[str, str]) -> dict[str, Any]:
        share = self.share(caller, None)
        warehouse = params.get("warehouse")
        if warehouse and warehouse.casefold() != share.name.casefold():
            raise RestError(403, "ForbiddenException", "The warehouse does not exist or is not shared with you.")
        return {"defaults": {}, "overrides": {"prefix": share.name, **SERVER_PLANNING}, "endpoints": ENDPOINTS}

    def list_namespaces(self, caller: Caller, params: dict[str, str], *, prefix: str) -> dict[str, Any]:
        share = self.share(caller, prefix)
        parent = params.get("parent")
        names = [] if parent else share.schemas()
        if parent and not share.has_schema(parent):
            raise no_such_namespace()  # our namespaces have one level: a known parent has no children
        items, following = page([[n] for n in names], params)
        return {"namespaces": items, "next-page-token": following}

    def namespace(self, caller: Caller, *, prefix: str, namespace: str) -> dict[str, Any]:
        share = self.share(caller, prefix)
        if not share.has_schema(namespace):
            raise no_such_namespace()
        name = next(s for s in share.schemas() if s.casefold() == namespace.casefold())
        return {"namespace": [name], "properties": {}}

    def list_tables(self, caller: Caller, params: dict[str, str], *, prefix: str, namespace: str) -> dict[str, Any]:
        share = self.share(caller, prefix)
        if not share.has_schema(namespace):
            raise no_such_namespace()
        found = [t for t in share.in_schema(namespace) if self._current(t) is not None]
        items, following = page([{"namespace": [t.schema], "name": t.name} for t in found], params)
        return {"identifiers": items, "next-page-token": following}

    def _current(self, table: SharedTable) -> str | None:
        return self.service.catalogs().metadata_location(table)

    def load(self, caller: Caller, *, prefix: str, namespace: str, table: str) -> Loaded:
        """The caller's table at its current metadata file, checked to be stamped for the caller."""
        try:
            share = self.share(caller, prefix)
        except RestError:
            raise no_such_table() from None
        found = share.table(namespace, table)
        location = self._current(found) if found is not None else None
        if found is None or location is None:
            raise no_such_table()
        data = metadata.read(location, found.options)
        try:
            self.service.check_owner(found, metadata.owner(data))
        except ProtocolError:  # its 404, logged there
            raise no_such_table() from None
        placement = Placement.of(data, self.vendor.location(found))
        self._remember(found, placement)
        return Loaded(table=found, location=location, metadata=data, placement=placement)

    def _remember(self, table: SharedTable, placement: Placement) -> str:
        """The table's folder, kept; for a table on S3 its filesystem too, made now: pyarrow makes no S3 client
        while another one's request is under way, and a reader in this process may be waiting on one."""
        root = self._roots.setdefault(table, placement.root if placement.remote else str(Path(placement.root).resolve()))
        if placement.remote and (table not in self._buckets or self._buckets[table][2] != table.options):
            self._buckets[table] = (*filesystem(root, table.options), table.options)  # new options: a new key
        return root

    def _credentials(self, caller: Caller, table: SharedTable) -> list[dict[str, object]]:
        return [self.vendor.vend(caller, table, now=self.service.clock())]

    def load_table(self, caller: Caller, params: dict[str, str], *, prefix: str, namespace: str, table: str) -> dict[str, Any]:
        snapshots = params.get("snapshots", "all")
        if snapshots not in ("all", "refs"):
            raise bad_request("snapshots must be all or refs")
        loaded = self.load(caller, prefix=prefix, namespace=namespace, table=table)
        return {"metadata-location": loaded.placement.moved(loaded.location),
                "metadata": metadata.for_reader(loaded.metadata, loaded.placement, refs_only=snapshots == "refs"),
                "config": {**self.vendor.config(), **SERVER_PLANNING},
                "storage-credentials": self._credentials(caller, loaded.table)}

    def load_credentials(self, caller: Caller, params: dict[str, str], *, prefix: str, namespace: str,
                         table: str) -> dict[str, Any]:
        loaded = self.load(caller, prefix=prefix, namespace=namespace, table=table)
        return {"storage-credentials": self._credentials(caller, loaded.table)}

    def plan(self, caller: Caller, body: dict[str, Any], *, prefix: str, namespace: str, table: str) -> dict[str, Any]:
        """A completed plan of every data file of the snapshot asked for (the current one by default)."""
        if body.get("start-snapshot-id") is not None or body.get("end-snapshot-id") is not None:
            raise RestError(406, "UnsupportedOperationException", "Incremental scan planning is not supported; plan a "
                                                                  "snapshot (snapshot-id) instead.")
        snapshot_id = body.get("snapshot-id")
        if snapshot_id is not None and (isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int)):
            raise bad_request("snapshot-id must be an integer")
        residual = body.get("filter")
        if residual is not None and not isinstance(residual, dict | bool):
            raise bad_request("filter must be an expression")
        loaded = self.load(caller, prefix=prefix, namespace=namespace, table=table)
        tasks = metadata.plan(loaded.location, loaded.placement, snapshot_id=snapshot_id, residual=residual,
                              options=loaded.table.options)
        found = loaded.table
        planned = snapshot_id if snapshot_id is not None else loaded.metadata.get("current-snapshot-id")
        self.service.audit.record(Read(  # the read audit (docs/sharing.md#read-audit): the files the plan hands out
            recipient=caller.recipient, token_id=caller.token_id, call="scan", share=found.share, schema=found.schema,
            table=found.name, model=found.model, version=int(planned) if planned is not None else -1, files=len(tasks),
            bytes=sum(int(t["data-file"]["file-size-in-bytes"]) for t in tasks)))
        return {"status": "completed", "file-scan-tasks": tasks, "delete-files": [], "plan-tasks": [],
                "storage-credentials": self._credentials(caller, loaded.table)}

    def file(self, grant: TableGrant, key: str) -> Path | StoredObject | None:
        """The data file ``key`` names in the bucket, while the grant's token is live, its table is still in the
        recipient's share and ``key`` is a file of that table's folder outside its metadata; else None. A file
        here is its path; a file of a table on S3, the object in the provider's bucket."""
        prefix = table_prefix(grant.share, grant.schema, grant.table)
        if not key.startswith(prefix) or not self.service.store.is_live(grant.token_id):
            return None
        share = self.service.catalogs().share(grant.recipient, grant.share, ICEBERG)
        table = share.table(grant.schema, grant.table) if share is not None else None
        if table is None:
            return None
        root = self._roots.get(table)
        if root is None:
            location = self._current(table)
            if location is None:
                return None
            root = self._remember(table, Placement.of(metadata.read(location, table.options), ""))
        rel = key[len(prefix):]
        if is_url(root):
            return self._object(table, rel)
        path = (Path(root) / rel).resolve()
        if not path.is_relative_to(root) or path.is_relative_to(Path(root) / "metadata") or not path.is_file():
            return None
        return path

    def _object(self, table: SharedTable, rel: str) -> StoredObject | None:
        if metadata.unsafe_key(rel) or rel == "metadata" or rel.startswith("metadata/"):
            return None
        fs, folder, _ = self._buckets[table]
        info = fs.get_file_info(f"{folder}/{rel}")
        if info.type != pafs.FileType.File or info.size is None:
            return None
        return StoredObject(fs=fs, path=info.path, size=int(info.size), mtime=info.mtime)


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise bad_request("The request body is not JSON.") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body

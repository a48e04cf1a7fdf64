"""The lines of the protocol's NDJSON answers, in its two response formats: ``parquet`` (protocol, metaData and
file objects of its own) and ``delta`` (Delta log actions wrapped, each data file's path replaced by its URL)."""

from __future__ import annotations

import hashlib
from typing import Any

from incsync.sharing.delta_log import DataFile

PARQUET = "parquet"
DELTA = "delta"


def file_id(path: str) -> str:
    """The same id for the same file of a table in every answer (the protocol's caching key)."""
    return hashlib.md5(path.encode(), usedforsecurity=False).hexdigest()


def protocol_line(protocol: dict[str, Any], fmt: str) -> dict[str, Any]:
    if fmt == DELTA:
        return {"protocol": {"deltaProtocol": protocol}}
    return {"protocol": {"minReaderVersion": 1}}


def metadata_line(metadata: dict[str, Any], fmt: str, *, version: int | None = None,
                  files: list[DataFile] | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {} if version is None else {"version": version}
    if files is not None:
        extra |= {"size": sum(f.size for f in files), "numFiles": len(files)}
    if fmt == DELTA:
        return {"metaData": {"deltaMetadata": metadata, **extra}}
    shown = {k: metadata[k] for k in ("id", "name", "description", "schemaString", "partitionColumns", "configuration")
             if metadata.get(k) is not None}
    return {"metaData": {**shown, "format": {"provider": "parquet"}, **extra}}


def file_line(file: DataFile, *, url: str, expires_ms: int, fmt: str, kind: str = "file",
              version: int | None = None, timestamp_ms: int | None = None) -> dict[str, Any]:
    """A data file: ``kind`` ``file`` (a snapshot's), or ``add``, ``remove`` or ``cdf`` (a version's changes)."""
    when = {k: v for k, v in (("version", version), ("timestamp", timestamp_ms)) if v is not None}
    if fmt == DELTA:
        return {"file": {"id": file_id(file.path), **when, "expirationTimestamp": expires_ms,
                         "deltaSingleAction": _delta_action(file, url=url, kind=kind, timestamp_ms=timestamp_ms)}}
    body: dict[str, Any] = {"url": url, "id": file_id(file.path), "partitionValues": file.partition_values,
                            "size": file.size}
    if file.stats is not None and kind in ("file", "add"):
        body["stats"] = file.stats
    return {kind: {**body, **when, "expirationTimestamp": expires_ms}}


def _delta_action(file: DataFile, *, url: str, kind: str, timestamp_ms: int | None) -> dict[str, Any]:
    if kind == "remove":
        return {"remove": {"path": url, "deletionTimestamp": timestamp_ms, "dataChange": True, "extendedFileMetadata": True,
                           "partitionValues": file.partition_values, "size": file.size}}
    if kind == "cdf":
        return {"cdc": {"path": url, "partitionValues": file.partition_values, "size": file.size, "dataChange": False}}
    add = {"path": url, "partitionValues": file.partition_values, "size": file.size,
           "modificationTime": file.modification_time, "dataChange": True}
    return {"add": add | ({"stats": file.stats} if file.stats is not None else {})}

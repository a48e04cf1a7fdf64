"""What the protocol reads from a shared Delta table in a local folder: a version's protocol, metadata and data
files (through delta-rs), the version at a time, and each version's file actions for changes (its commit file).

Only ``delta.*`` table properties reach a reader: incsync's own (the owner stamp, which names the tenant value)
stay the provider's. A version whose commit file or data files vacuum and log cleanup removed is an
``Unavailable`` error naming the version, never a server error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from incsync.destinations.ownership import OWNER_PROPERTY, Owner
from incsync.sharing import kept
from incsync.sharing.errors import Unavailable
from incsync.sharing.kept import log_name as _log_name
from incsync.storage.filesystems import filesystem
from incsync.storage.names import is_url

Options = Mapping[str, str] | None  # the storage options of a table on object storage (``root`` a URL)

CDF_PROPERTY = "delta.enableChangeDataFeed"


@dataclass(frozen=True)
class DataFile:
    """One file of a table: ``path`` relative to its root as the log spells it (percent-encoded)."""

    path: str
    size: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    stats: str | None = None
    modification_time: int = 0

    def local(self, root: str) -> Path:
        return Path(root) / unquote(self.path)

    def key(self, root: str) -> str:
        """Its URL under a table ``root`` on object storage."""
        return f"{root.rstrip('/')}/{unquote(self.path)}"


@dataclass(frozen=True)
class TableState:
    """One version of a table: what a metadata or snapshot query answers."""

    version: int
    protocol: dict[str, Any]
    metadata: dict[str, Any]  # a Delta metaData action, its properties cut to ``delta.*``
    owner: str | None  # the recipient the table is stamped for
    files: list[DataFile]


@dataclass(frozen=True)
class VersionActions:
    """The file actions one commit made, for changes and streaming reads."""

    version: int
    timestamp_ms: int
    adds: list[DataFile]
    removes: list[DataFile]
    cdc: list[DataFile]
    metadata: dict[str, Any] | None
    # A MERGE that reported no row inserted, updated or deleted: files it rewrote changed no row.
    unchanged: bool = False


def _open(root: str, version: int | None = None, options: Options = None) -> DeltaTable:
    storage = dict(options) if options else None
    try:
        return DeltaTable(root, storage_options=storage) if version is None else DeltaTable(root, version=version,
                                                                                            storage_options=storage)
    except TableNotFoundError:
        raise Unavailable("the table holds no data yet") from None
    except DeltaError as exc:
        raise Unavailable(f"version {version} of the table does not exist or is no longer kept") from exc


def latest_version(root: str, *, options: Options = None) -> int:
    known = None if is_url(root) else kept.known_latest(root)
    return known if known is not None else _open(root, options=options).version()


def public_metadata(action: dict[str, Any]) -> dict[str, Any]:
    configuration = {k: v for k, v in (action.get("configuration") or {}).items() if k.startswith("delta.")}
    return {**action, "configuration": configuration}


def table_state(root: str, version: int | None = None, *, with_files: bool = True, options: Options = None) -> TableState:
    """Version ``version`` of the table (None: its latest), with its data files or without."""
    if is_url(root):  # a listing on object storage costs what reading the log does: nothing is kept
        return _read_state(root, version, with_files, options)
    found = kept.state(root, version, with_files)
    if isinstance(found, TableState):
        return found
    state = _read_state(root, version, with_files, options)
    kept.keep(root, state.version, with_files, state, latest=version is None)
    return state


def _read_state(root: str, version: int | None, with_files: bool, options: Options) -> TableState:
    dt = _open(root, version, options)
    meta = dt.metadata()
    protocol = dt.protocol()
    stamped = meta.configuration.get(OWNER_PROPERTY)
    metadata = {
        "id": meta.id, "name": meta.name, "description": meta.description, "format": {"provider": "parquet", "options": {}},
        "schemaString": dt.schema().to_json(), "partitionColumns": list(meta.partition_columns),
        "configuration": dict(meta.configuration), "createdTime": meta.created_time,
    }
    return TableState(
        version=dt.version(),
        protocol={k: v for k, v in {"minReaderVersion": protocol.min_reader_version, "minWriterVersion": protocol.min_writer_version,
                                    "readerFeatures": protocol.reader_features, "writerFeatures": protocol.writer_features}.items()
                  if v is not None},
        metadata=public_metadata({k: v for k, v in metadata.items() if v is not None}),
        owner=Owner.from_json(stamped).recipient if stamped else None,
        files=_files(dt) if with_files else [],
    )


def _files(dt: DeltaTable) -> list[DataFile]:
    actions = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    return [DataFile(path=a["path"], size=a["size_bytes"], modification_time=a["modification_time"],
                     partition_values={k: _partition_text(v) for k, v in (a.get("partition_values") or {}).items()},
                     stats=None if a.get("num_records") is None else json.dumps(
                         {"numRecords": a["num_records"], "nullCount": a.get("null_count") or {}}, separators=(",", ":")))
            for a in actions]


def _partition_text(value: Any) -> str | None:
    """A partition value as the protocol serializes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.isoformat(sep=" ") if hasattr(value, "hour") else str(value)


@lru_cache(maxsize=256)
def _store(root: str, options: tuple[tuple[str, str], ...]) -> tuple[pafs.FileSystem, str]:
    return filesystem(root, dict(options))


def _remote(root: str, options: Options) -> tuple[pafs.FileSystem, str]:
    return _store(root, tuple(sorted((options or {}).items())))


def _commit_lines(root: str, version: int, options: Options = None) -> list[dict[str, Any]]:
    try:
        if is_url(root):
            fs, base = _remote(root, options)
            with fs.open_input_stream(f"{base}/{_log_name(version)}") as stream:
                text = stream.read().decode()
        else:
            text = (Path(root) / _log_name(version)).read_text()
    except FileNotFoundError:
        raise Unavailable(f"the log of version {version} is no longer kept (log retention); ask for a later version") from None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commit_mtime_ms(root: str, version: int, options: Options) -> int:
    if is_url(root):
        fs, base = _remote(root, options)
        mtime = fs.get_file_info(f"{base}/{_log_name(version)}").mtime
        return int(mtime.timestamp() * 1000) if mtime is not None else 0
    return int((Path(root) / _log_name(version)).stat().st_mtime * 1000)


def commit_timestamp(root: str, version: int, *, options: Options = None) -> int:
    """When ``version`` was committed, in epoch milliseconds (its commitInfo, else its log file's time)."""
    for action in _commit_lines(root, version, options):
        if "commitInfo" in action and isinstance(action["commitInfo"].get("timestamp"), int):
            return action["commitInfo"]["timestamp"]
    return _commit_mtime_ms(root, version, options)


def has_log(root: str, *, options: Options = None) -> bool:
    """Whether a table's log exists at ``root`` (its first transfer created it)."""
    if not is_url(root):
        return (Path(root) / "_delta_log").is_dir()
    fs, base = _remote(root, options)
    return any(True for _ in fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True)))


def earliest_version(root: str, *, options: Options = None) -> int:
    """The oldest version whose commit file the log still keeps."""
    if is_url(root):
        fs, base = _remote(root, options)
        names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True))]
    else:
        names = [p.name for p in (Path(root) / "_delta_log").glob("*.json")]
    versions = [int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit()]
    if not versions:
        raise Unavailable("the table holds no data yet")
    return min(versions)


def version_at(root: str, timestamp_ms: int, *, at_or_after: bool, options: Options = None) -> int:
    """The last version committed at or before ``timestamp_ms`` (``at_or_after``: the first at or after it)."""
    low, high = earliest_version(root, options=options), latest_version(root, options=options)

    def when(version: int) -> int:
        return commit_timestamp(root, version, options=options)

    if at_or_after and timestamp_ms > when(high):
        raise Unavailable("the timestamp is after the table's latest version")
    if not at_or_after and timestamp_ms < when(low):
        raise Unavailable("the timestamp is before the table's earliest version still kept")
    while low < high:  # commit times grow with versions
        if at_or_after:
            middle = (low + high) // 2
            low, high = (middle + 1, high) if when(middle) < timestamp_ms else (low, middle)
        else:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if when(middle) <= timestamp_ms else (low, middle - 1)
    return low


def version_actions(root: str, version: int, *, options: Options = None) -> VersionActions:
    adds, removes, cdc, metadata, timestamp, unchanged = [], [], [], None, None, False
    for action in _commit_lines(root, version, options):
        if "add" in action and action["add"].get("dataChange", True):
            adds.append(_action_file(root, action["add"], options))
        elif "remove" in action and action["remove"].get("dataChange", True):
            removes.append(_action_file(root, action["remove"], options))
        elif "cdc" in action:
            cdc.append(_action_file(root, action["cdc"], options))
        elif "metaData" in action:
            metadata = action["metaData"]
        elif "commitInfo" in action:
            info = action["commitInfo"]
            timestamp = info["timestamp"] if isinstance(info.get("timestamp"), int) else None
            unchanged = _unchanged_merge(info)
    if timestamp is None:
        timestamp = _commit_mtime_ms(root, version, options)
    return VersionActions(version=version, timestamp_ms=timestamp, adds=adds, removes=removes, cdc=cdc,
                          metadata=None if metadata is None else public_metadata(metadata), unchanged=unchanged)


def _unchanged_merge(info: dict[str, Any]) -> bool:
    metrics = info.get("operationMetrics") or {}
    counts = [metrics.get(f"num_target_rows_{what}", metrics.get(f"numTargetRows{what.title()}"))
              for what in ("inserted", "updated", "deleted")]
    return info.get("operation") == "MERGE" and all(c is not None and int(c) == 0 for c in counts)


def _action_file(root: str, action: dict[str, Any], options: Options = None) -> DataFile:
    size = action.get("size")
    if size is None and is_url(root):  # a remove may leave its size out; the file itself still has it until vacuum
        fs, base = _remote(root, options)
        info = fs.get_file_info(f"{base}/{unquote(action['path'])}")
        size = info.size if info.type == pafs.FileType.File and info.size is not None else 0
    elif size is None:
        local = Path(root) / unquote(action["path"])
        size = local.stat().st_size if local.exists() else 0
    return DataFile(path=action["path"], size=size, partition_values=action.get("partitionValues") or {},
                    stats=action.get("stats"), modification_time=action.get("modificationTime") or 0)


def keeps_changes(metadata: dict[str, Any]) -> bool:
    return (metadata.get("configuration") or {}).get(CDF_PROPERTY, "false").lower() == "true"

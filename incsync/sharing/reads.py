"""The protocol's table reads: version, metadata, query (a snapshot, a past version or time, or the data files
changed since a version) and changes (the change data feed between two versions).

Each answer pins one table version before it lists a file, so a reader sees a committed version whole, never
half of a transfer's commit. Predicate and limit hints are ignored, as the protocol allows: the client
filters what it reads.
"""

from __future__ import annotations

from typing import Any

from incsync.sharing import delta_log
from incsync.sharing.actions import file_line, metadata_line, protocol_line
from incsync.sharing.audit import Read
from incsync.sharing.catalog import SharedTable
from incsync.sharing.delta_log import DataFile
from incsync.sharing.protocol import (
    CAPABILITIES_HEADER,
    VERSION_HEADER,
    Answer,
    Caller,
    flag,
    invalid,
    optional_int,
    response_format,
    timestamp_ms,
)
from incsync.sharing.service import SharingService


def _audit(service: SharingService, caller: Caller, table: SharedTable, call: str, version: int, files: list[DataFile],
           ending: int | None = None) -> None:
    """The read audit's row for an answer listing ``files`` (docs/sharing.md#read-audit)."""
    service.audit.record(Read(recipient=caller.recipient, token_id=caller.token_id, call=call, share=table.share,
                              schema=table.schema, table=table.name, model=table.model, version=version,
                              ending_version=ending, files=len(files), bytes=sum(f.size for f in files)))


def table_version(service: SharingService, caller: Caller, table: SharedTable, params: dict[str, str]) -> Answer:
    state = delta_log.table_state(table.root, with_files=False, options=table.options)
    service.check_owner(table, state.owner)
    since = timestamp_ms(params, "startingTimestamp")
    version = state.version if since is None else delta_log.version_at(table.root, since, at_or_after=True, options=table.options)
    return Answer(headers={VERSION_HEADER: str(version)})


def _pinned(params: dict[str, Any], table: SharedTable) -> int | None:
    """The version a ``version`` or ``timestamp`` asks for; None: the latest."""
    if params.get("version") is not None and params.get("timestamp") is not None:
        raise invalid("Please only provide one of: version, timestamp")
    when = timestamp_ms(params, "timestamp")
    return optional_int(params, "version") if when is None else delta_log.version_at(table.root, when, at_or_after=False,
                                                                                      options=table.options)


def _headers(version: int, fmt: str) -> dict[str, str]:
    return {VERSION_HEADER: str(version), CAPABILITIES_HEADER: f"responseformat={fmt}"}


def table_metadata(service: SharingService, caller: Caller, table: SharedTable, params: dict[str, str],
                   capabilities: str | None) -> Answer:
    pinned = _pinned(params, table)
    state = delta_log.table_state(table.root, pinned, with_files=False, options=table.options)
    service.check_owner(table, state.owner)
    fmt = response_format(capabilities, state.protocol)
    return Answer(lines=[protocol_line(state.protocol, fmt), metadata_line(state.metadata, fmt, version=pinned)],
                  headers=_headers(state.version, fmt))


def query(service: SharingService, caller: Caller, table: SharedTable, body: dict[str, Any],
          capabilities: str | None) -> Answer:
    if sum(body.get(k) is not None for k in ("version", "timestamp", "startingVersion")) > 1:
        raise invalid("Please only provide one of: version, timestamp, startingVersion")
    start = optional_int(body, "startingVersion")
    if start is not None:
        return _since(service, caller, table, start, optional_int(body, "endingVersion"), capabilities)
    pinned = _pinned(body, table)
    state = delta_log.table_state(table.root, pinned, options=table.options)
    service.check_owner(table, state.owner)
    fmt = response_format(capabilities, state.protocol)
    url, expires = service.file_urls(caller, table)
    when = {} if pinned is None else {"version": state.version,
                                      "timestamp_ms": delta_log.commit_timestamp(table.root, state.version, options=table.options)}
    lines = [protocol_line(state.protocol, fmt), metadata_line(state.metadata, fmt, version=pinned, files=state.files)]
    lines += [file_line(f, url=url(f), expires_ms=expires, fmt=fmt, **when) for f in state.files]
    _audit(service, caller, table, "query", state.version, state.files)
    return Answer(lines=lines, headers=_headers(state.version, fmt))


def _range(table: SharedTable, start: int, end: int | None) -> tuple[int, int]:
    latest = delta_log.latest_version(table.root, options=table.options)
    if start > latest:
        raise invalid(f"Provided start version({start}) for reading change data is invalid. Start version cannot be "
                      f"greater than the latest version of the table({latest}).")
    if end is not None and end > latest:
        raise invalid(f"Provided end version({end}) is invalid. End version cannot be greater than the latest version "
                      f"of the table({latest}).")
    end = latest if end is None else end
    if start > end:
        raise invalid(f"CDF range from start {start} to end {end} was invalid. End cannot be before start.")
    return start, end


def _since(service: SharingService, caller: Caller, table: SharedTable, start: int, end: int | None,
           capabilities: str | None) -> Answer:
    """The data files each version from ``start`` added and removed: what a streaming reader asks for."""
    start, end = _range(table, start, end)
    state = delta_log.table_state(table.root, start, with_files=False, options=table.options)
    service.check_owner(table, state.owner)
    fmt = response_format(capabilities, state.protocol)
    url, expires = service.file_urls(caller, table)
    lines = [protocol_line(state.protocol, fmt), metadata_line(state.metadata, fmt, version=start)]
    listed: list[DataFile] = []
    for version in range(start, end + 1):
        actions = delta_log.version_actions(table.root, version, options=table.options)
        if actions.metadata is not None and version > start:
            lines.append(metadata_line(actions.metadata, fmt, version=version))
        for kind, files in (("add", actions.adds), ("remove", actions.removes)):
            lines += [file_line(f, url=url(f), expires_ms=expires, fmt=fmt, kind=kind, version=version,
                                timestamp_ms=actions.timestamp_ms) for f in files]
            listed += files
    _audit(service, caller, table, "query", start, listed, ending=end)
    return Answer(lines=lines, headers=_headers(start, fmt))


def changes(service: SharingService, caller: Caller, table: SharedTable, params: dict[str, str],
            capabilities: str | None) -> Answer:
    """The change data feed from one version to another, both included, where the table keeps it: its change
    files where a commit wrote them, else the files it added (inserts) and removed (deletes)."""
    for edge in ("starting", "ending"):
        if params.get(f"{edge}Version") is not None and params.get(f"{edge}Timestamp") is not None:
            raise invalid(f"Multiple {edge} arguments provided for CDF read. Please provide one of either "
                          f"{edge}Timestamp or {edge}Version.")
    since, until = timestamp_ms(params, "startingTimestamp"), timestamp_ms(params, "endingTimestamp")
    start = optional_int(params, "startingVersion") if since is None else delta_log.version_at(
        table.root, since, at_or_after=True, options=table.options)
    if start is None:
        raise invalid("No startingVersion or startingTimestamp provided for CDF read.")
    end = optional_int(params, "endingVersion") if until is None else delta_log.version_at(
        table.root, until, at_or_after=False, options=table.options)
    start, end = _range(table, start, end)
    historical = flag(params, "includeHistoricalMetadata")
    state = delta_log.table_state(table.root, start if historical else end, with_files=False, options=table.options)
    service.check_owner(table, state.owner)
    at_start = state if historical else delta_log.table_state(table.root, start, with_files=False, options=table.options)
    if not delta_log.keeps_changes(at_start.metadata):
        raise _not_recorded(start, start, end)
    fmt = response_format(capabilities, state.protocol)
    url, expires = service.file_urls(caller, table)
    lines = [protocol_line(state.protocol, fmt), metadata_line(state.metadata, fmt, version=state.version)]
    listed: list[DataFile] = []
    for version in range(start, end + 1):
        actions = delta_log.version_actions(table.root, version, options=table.options)
        if actions.metadata is not None and not delta_log.keeps_changes(actions.metadata):
            raise _not_recorded(version, start, end)
        if actions.metadata is not None and historical and version > start:
            lines.append(metadata_line(actions.metadata, fmt, version=version))
        if actions.cdc:
            picked = [("cdf", actions.cdc)]
        elif actions.unchanged:
            picked = []
        else:
            picked = [("add", actions.adds), ("remove", actions.removes)]
        for kind, files in picked:
            lines += [file_line(f, url=url(f), expires_ms=expires, fmt=fmt, kind=kind, version=version,
                                timestamp_ms=actions.timestamp_ms) for f in files]
            listed += files
    _audit(service, caller, table, "changes", start, listed, ending=end)
    return Answer(lines=lines, headers=_headers(start, fmt))


def _not_recorded(version: int, start: int, end: int) -> Exception:
    return invalid(f"Error getting change data for range [{start}, {end}] as change data was not recorded for "
                   f"version [{version}]")

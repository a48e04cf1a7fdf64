"""Materialization metadata keys (docs/design.md#metadata), defined once."""

from __future__ import annotations

import functools
from datetime import datetime
from urllib.parse import quote

import dagster as dg

from incsync.core.horizon import FUTURE_DATED_ROWS, HELD_BACK_SECONDS, HORIZON, HORIZON_WARNING, SOURCE_HORIZON
from incsync.transfer.request import TransferOutcome, high_watermark_epoch

ROWS_TRANSFERRED = "rows_transferred"
DELTA_ROWS_TRANSFERRED = "delta_rows_transferred"
HIGH_WATERMARK = "high_watermark"
HIGH_WATERMARK_EPOCH = "high_watermark_epoch_seconds"
WINDOW_START = "window_start"
WINDOW_END = "window_end"
LOWER_BOUND = "lower_bound"
UPPER_BOUND = "upper_bound"
LOOKBACK_SECONDS = "lookback_seconds"
TRANSFER_ID = "transfer_id"
TRANSFER_TYPE = "transfer_type"
FULL_REFRESH_REASON = "full_refresh_reason"
DESTINATION = "destination"
STAGED_BYTES = "staged_bytes"
DURATION_SECONDS = "duration_seconds"
RECIPIENT = "recipient"
COLUMN_SCHEMA = "dagster/column_schema"
TRANSFER_WINDOWS = "transfer_windows"  # windows the transfer (one read) covered
TRANSFER_BATCH = "transfer_batch"  # "k/n": the commit holding this window, when the transfer was split
HIGH_WATERMARK_EXACT = "high_watermark_exact"  # ISO 8601 with microseconds: the UI shows timestamps to the second
DESTINATION_PATH = "destination_path"
TRANSFER_RECORD = "transfer_record"  # on a window that is not its commit's last: the UI's page of the commit's record
ROW_COUNT = "dagster/row_count"
HORIZON_HELD_BACK_SECONDS = HELD_BACK_SECONDS  # the horizon's keys are defined once, in incsync.core.horizon


# A backfill's windows repeat the same values (the same window starts for every recipient, zeros, one
# destination name, one transfer id per commit): metadata values are immutable, so each is built once.
@functools.lru_cache(maxsize=8192)
def _ts(iso: str) -> dg.MetadataValue:
    return dg.MetadataValue.timestamp(datetime.fromisoformat(iso))


_int = functools.lru_cache(maxsize=4096)(dg.MetadataValue.int)
_text = functools.lru_cache(maxsize=4096)(dg.MetadataValue.text)
_url = functools.lru_cache(maxsize=4096)(dg.MetadataValue.url)


def transfer_metadata(outcome: TransferOutcome, *, destination: str, path: str | None = None,
                      record_url: str | None = None) -> dict[str, dg.MetadataValue]:
    """The materialization's metadata; ``path``: where the recipient's copy is (Delta table, storage prefix);
    ``record_url``: the UI's page of the commit's record (its last window's partition).

    Every window carries its own counts and its ``transfer_id``. What the windows of one commit share
    (bounds, HW, type, destination, sizes, the schema, the horizon, the destination's version and path)
    is recorded once, on the commit's last window (``TransferOutcome.detailed``); every other window links
    to it (docs/design.md#bookkeeping). A backfill of many recipients stores one event per window, most of
    them empty: repeating the shared facts on each made its events several times larger."""
    record = outcome.record
    metadata: dict[str, dg.MetadataValue] = {
        ROWS_TRANSFERRED: _int(record.rows_transferred),
        DELTA_ROWS_TRANSFERRED: _int(record.delta_rows_transferred),
    }
    if record.rows_transferred:
        metadata[ROW_COUNT] = _int(record.rows_transferred)
    metadata[TRANSFER_ID] = _text(record.transfer_id)
    if outcome.batch:
        metadata[TRANSFER_BATCH] = _text(outcome.batch)
    if not outcome.detailed:
        if record_url:
            metadata[TRANSFER_RECORD] = _url(record_url)
        if HORIZON_WARNING in record.extra:  # a warning goes with every window it concerns
            metadata[HORIZON_WARNING] = _text(record.extra[HORIZON_WARNING])
        return metadata
    hw = record.high_watermark
    hw_epoch = high_watermark_epoch(record)
    metadata.update({
        HIGH_WATERMARK: dg.MetadataValue.timestamp(hw) if hw is not None else dg.MetadataValue.null(),
        HIGH_WATERMARK_EPOCH: _int(hw_epoch) if hw_epoch is not None else dg.MetadataValue.null(),
        HIGH_WATERMARK_EXACT: dg.MetadataValue.text(hw.isoformat()) if hw is not None else dg.MetadataValue.null(),
        WINDOW_START: _ts(record.window_start),
        WINDOW_END: _ts(record.window_end),
        LOWER_BOUND: _ts(record.lower_bound),
        UPPER_BOUND: _ts(record.upper_bound),
        LOOKBACK_SECONDS: _int(record.lookback_seconds),
        TRANSFER_TYPE: _text(record.transfer_type),
        DESTINATION: _text(destination),
        RECIPIENT: dg.MetadataValue.text(record.recipient_id),
        STAGED_BYTES: _int(outcome.staged_bytes),
        DURATION_SECONDS: dg.MetadataValue.float(round(outcome.duration_seconds, 3)),
    })
    if path:
        metadata[DESTINATION_PATH] = dg.MetadataValue.path(path)
    if outcome.columns:
        metadata[COLUMN_SCHEMA] = dg.MetadataValue.table_schema(
            dg.TableSchema(columns=[dg.TableColumn(name=name, type=kind) for name, kind in outcome.columns])
        )
    if outcome.windows_in_transfer > 1:
        metadata[TRANSFER_WINDOWS] = _int(outcome.windows_in_transfer)
    if outcome.full_refresh_reason:
        metadata[FULL_REFRESH_REASON] = dg.MetadataValue.text(outcome.full_refresh_reason)
    metadata.update(horizon_metadata(record.extra))
    for key, value in outcome.destination_metadata.items():
        metadata[key] = dg.MetadataValue.int(value) if isinstance(value, int) else dg.MetadataValue.text(str(value))
    return metadata


def partition_page(asset_key: dg.AssetKey, partition: str) -> str:
    """The Dagster UI's page of one partition of an asset, relative to the UI's root (what ``transfer_record``
    links to: one click from any window of a commit to the commit's record)."""
    path = "/".join(quote(part, safe="") for part in asset_key.path)
    return f"/assets/{path}?view=partitions&partition={quote(partition, safe='')}"


def horizon_metadata(extra: dict[str, str]) -> dict[str, dg.MetadataValue]:
    """The safe horizon's facts (docs/design.md#safe-horizon), from the transfer record that holds them."""
    metadata: dict[str, dg.MetadataValue] = {}
    if SOURCE_HORIZON in extra:
        metadata[SOURCE_HORIZON] = _ts(extra[SOURCE_HORIZON])
        metadata[HORIZON] = dg.MetadataValue.text(extra[HORIZON])
        metadata[HORIZON_HELD_BACK_SECONDS] = dg.MetadataValue.float(float(extra[HELD_BACK_SECONDS]))
        metadata[FUTURE_DATED_ROWS] = dg.MetadataValue.int(int(extra[FUTURE_DATED_ROWS]))
    if HORIZON_WARNING in extra:
        metadata[HORIZON_WARNING] = dg.MetadataValue.text(extra[HORIZON_WARNING])
    return metadata

"""What a destination commits and reads back: transfer records, states, removals (the values of the protocol)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from incsync.core.bounds import from_micros, to_micros

if TYPE_CHECKING:  # a removal's keys are a pyarrow table; a code server never builds one
    import pyarrow as pa

INCREMENTAL = "INCREMENTAL"
FULL_REFRESH = "FULL_REFRESH"
REPAIR = "REPAIR"  # re-transfers keys verify found wrong: their rows replace the destination's whatever their dates
DELETED_AT = "_incsync_deleted_at"


@dataclass(frozen=True)
class Removals:
    """Keys to take out of a destination in the same commit as a batch: deleted (hard) or stamped
    ``_incsync_deleted_at`` (soft)."""

    keys: pa.Table  # the primary key columns
    mode: str = "hard"
    at: datetime | None = None

    @property
    def rows(self) -> int:
        return self.keys.num_rows


@dataclass(frozen=True)
class TransferRecord:
    """What a destination commits together with the data of one transfer."""

    transfer_id: str
    model_name: str
    recipient_id: str
    window_start: str
    window_end: str
    lower_bound: str
    upper_bound: str
    rows_transferred: int
    delta_rows_transferred: int
    high_watermark_micros: int | None
    transfer_type: str
    fingerprint: str
    lookback_seconds: int
    committed_at: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def high_watermark(self) -> datetime | None:
        return None if self.high_watermark_micros is None else from_micros(self.high_watermark_micros)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransferRecord:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class DestinationState:
    """The last committed transfer of (model, recipient), if any."""

    last_transfer: TransferRecord | None = None
    version: str | None = None  # an opaque token the publish checks to refuse stale writers
    # Set when the destination's data and its transfer log disagree (data dropped, emptied or deleted while
    # the log stays, or the log gone while data stays): the next transfer re-syncs from the recipient's start.
    reset_reason: str | None = None

    @property
    def high_watermark(self) -> datetime | None:
        return self.last_transfer.high_watermark if self.last_transfer else None


def reset_reason(where: str, record: TransferRecord | None, *, has_data: bool, missing: str | None = None) -> str | None:
    """Why ``where`` must be re-synced from the start, or None when its data and transfer log agree.

    A log whose high watermark is set promises rows; data without a log of this recipient cannot be continued.
    """
    if missing:
        return f"destination_reset: {missing}"
    if record is not None and record.high_watermark_micros is not None and not has_data:
        return (f"destination_reset: {where} holds no rows, but its transfer log records transfer {record.transfer_id} "
                f"up to {from_micros(record.high_watermark_micros).isoformat()}")
    if record is None and has_data:
        return f"destination_reset: {where} holds rows but no transfer record of this recipient"
    return None


def table_state(where: str, record: TransferRecord | None, stamp: Any, *, exists: bool, has_data: bool) -> DestinationState:
    """The state of a copy kept in a SQL table: its newest ``record``, checked against the owner ``stamp``
    (an ``Owner``: a move since that record), the table's existence and whether it holds a row."""
    missing = stamp.moved_reason(record.transfer_id if record else None) if stamp else None
    if not missing and record is not None and record.high_watermark_micros is not None and not exists:
        missing = f"{where} was dropped while its transfer log records transfer {record.transfer_id}"
    reason = reset_reason(where, record, has_data=has_data, missing=missing)
    return DestinationState(last_transfer=record, version=record.transfer_id if record else None, reset_reason=reason)


def hw_micros(ts: datetime | None) -> int | None:
    return None if ts is None else to_micros(ts)

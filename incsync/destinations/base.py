"""The protocol every destination implements: read state, publish a staged batch with its record."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from incsync.core.bounds import from_micros, to_micros
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.staging.batch import StagedBatch

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


class Destination(ABC):
    """One recipient's destination; publish is all-or-nothing (write-ahead-publish)."""

    kind: str
    name: str
    maintained = False  # whether ``maintain`` has anything to do
    # Whether ``publish`` takes ``new_keys=True``: the caller knows the table holds none of the batch's
    # keys (the later commits of a recipient's first backfill), so an append may stand for the upsert.
    appends_new_keys = False

    @abstractmethod
    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last committed transfer record, read back from the destination itself."""

    @abstractmethod
    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
        removals: Removals | None = None,
    ) -> dict[str, object]:
        """Make the batch and its record visible at once; return extra metadata (e.g. table version).

        A ``FULL_REFRESH`` record replaces the recipient's rows instead of merging into them; a ``REPAIR``
        record's rows replace the destination's rows of the same keys. ``removals`` go in the same commit.
        Raises LeaseError when the state moved since ``expected`` was read.
        """

    def maintain(self, models: list[ModelConfig], *, compact: bool, dry_run: bool) -> list[Any]:
        """Compact and vacuum what the models' copies occupy here (``incsync maintain``); a list of
        ``Maintained``, one per table or prefix. Nothing to do by default: a PostgreSQL server reclaims
        the space of updated rows itself (autovacuum)."""
        return []

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> object | None:
        """Stamp ``recipient`` as the owner of the model's table or prefix (an explicit move, logged in the
        destination); return the previous owner, if any."""
        raise NotImplementedError(f"{self.kind} destinations cannot transfer ownership")


def reset_reason(where: str, record: TransferRecord | None, *, has_data: bool, missing: str | None = None) -> str | None:
    """Why ``where`` must be re-synced from the start, or None when its data and transfer log agree.

    A log whose high watermark is set promises rows; data without a log of this recipient cannot be continued.
    """
    if missing:
        return f"destination_reset: {missing}"
    if record is not None and record.high_watermark_micros is not None and not has_data:
        return (f"destination_reset: {where} holds no rows, but its transfer log records transfer {record.transfer_id} "
                f"up to {record.high_watermark.isoformat()}")  # type: ignore[union-attr]
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

"""The protocol every destination implements: read state, publish a staged batch with its record."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from datetime import datetime

import pyarrow as pa

from incsync.changes import from_micros, to_micros
from incsync.config import ModelConfig, RecipientConfig
from incsync.staging import StagedBatch

INCREMENTAL = "INCREMENTAL"
FULL_REFRESH = "FULL_REFRESH"


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

    @property
    def high_watermark(self) -> datetime | None:
        return self.last_transfer.high_watermark if self.last_transfer else None


class Destination(ABC):
    """One recipient's destination; publish is all-or-nothing (write-ahead-publish)."""

    kind: str
    name: str

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
    ) -> dict[str, object]:
        """Make the batch and its record visible at once; return extra metadata (e.g. table version).

        A ``FULL_REFRESH`` record replaces the recipient's rows instead of merging into them.
        Raises LeaseError when the state moved since ``expected`` was read.
        """

    @abstractmethod
    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        """Everything a reader of the destination sees for (model, recipient)."""


def hw_micros(ts: datetime | None) -> int | None:
    return None if ts is None else to_micros(ts)

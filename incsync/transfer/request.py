"""One transfer of (model, recipient, contiguous windows): its id, the request per partition, the span
prepared for it and the outcome per window (docs/design.md#one-transfer).

The steps are ``prepare`` (state and bounds) and ``reads`` (the lazy read), which a model's asset body
runs, then ``execute`` (stage once) and ``publish`` (validate, attribute rows to windows, commit), which
its IO manager runs; ``execute.run_span`` runs them all for one span.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.core.bounds import Bounds, epoch_seconds_floor
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig, RetryPolicy
from incsync.destinations.base import Destination, DestinationState, TransferRecord
from incsync.core.horizon import HorizonCap, SourceHorizon, horizon_cap
from incsync.core.fingerprint import model_fingerprint
from incsync.core.windows import WindowPartition, grid_start, window_of
from incsync.sources.base import Source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TransferRun:
    """What every partition of a run shares: the model, its source and Spark, and how the run was launched."""

    model: ModelConfig
    grid_start: datetime
    lookback_seconds: int
    fingerprint: str
    source: Source
    spark: Callable[[], SparkSession]
    scheduled: bool = False
    full_refresh: bool = False
    retries: RetryPolicy = field(default_factory=RetryPolicy)
    allow_mass_delete: bool = False  # deletes: a removal past the model's max_delete_fraction goes ahead

    @classmethod
    def for_model(cls, config: IncsyncConfig, model: ModelConfig, *, source: Source, spark: Callable[[], SparkSession],
                  scheduled: bool = False, full_refresh: bool = False, allow_mass_delete: bool = False) -> TransferRun:
        """A run of ``model`` as ``config`` sets it up: its grid, lookback, fingerprint and retry policy."""
        return cls(model=model, grid_start=grid_start(model), lookback_seconds=config.lookback_seconds(model),
                   fingerprint=model_fingerprint(model), source=source, spark=spark, scheduled=scheduled,
                   full_refresh=full_refresh, retries=config.retries, allow_mass_delete=allow_mass_delete)

    def request(self, recipient: RecipientConfig, destination: Destination, window_key: str) -> TransferRequest:
        """The request of one (window, recipient) partition of this run."""
        return TransferRequest(self, recipient, destination, WindowPartition(window_of(self.model, window_key), recipient.id))


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """One (window, recipient) partition of a run: the asset builds them and opens their reads, the IO
    manager publishes. What the run's partitions share is held once, in ``run``."""

    run: TransferRun
    recipient: RecipientConfig
    destination: Destination
    partition: WindowPartition

    model = property(lambda self: self.run.model)
    grid_start = property(lambda self: self.run.grid_start)
    lookback_seconds = property(lambda self: self.run.lookback_seconds)
    fingerprint = property(lambda self: self.run.fingerprint)
    source = property(lambda self: self.run.source)
    spark = property(lambda self: self.run.spark)
    scheduled = property(lambda self: self.run.scheduled)
    full_refresh = property(lambda self: self.run.full_refresh)
    retries = property(lambda self: self.run.retries)
    allow_mass_delete = property(lambda self: self.run.allow_mass_delete)

    @property
    def recipient_id(self) -> str:
        return self.recipient.id

    @property
    def start(self) -> datetime:
        return self.partition.start

    @property
    def end(self) -> datetime:
        return self.partition.end


@dataclass(frozen=True)
class TransferOutcome:
    """What one window partition of a committed transfer records: its own rows, its batch's commit."""

    record: TransferRecord  # the window's share: its bounds, its rows; HW and id of the commit holding it
    bounds: Bounds  # the bounds of the commit (batch) that holds the window
    staged_bytes: int
    duration_seconds: float
    full_refresh_reason: str | None
    destination_metadata: dict[str, object] = field(default_factory=dict)
    columns: tuple[tuple[str, str], ...] = ()  # (name, Arrow type) of the published batch
    windows_in_transfer: int = 1
    batch: str | None = None  # "k/n" when the transfer was split into several commits
    commit_rows: int = 0  # rows of the commit holding the window (all its windows)
    first_of_commit: bool = True  # the first window of its commit (one log line per commit, not per window)
    last_of_commit: bool = True  # the last window of its commit (its windows are reported together)
    detailed: bool = True  # holds rows or ends its commit: its materialization carries the transfer's own facts too


OnCommit = Callable[[TransferRequest, TransferOutcome], None]
OnStart = Callable[[Sequence[TransferRequest]], None]


@dataclass
class PreparedSpan:
    """A span's state, bounds and staging folder, decided before anything is read."""

    requests: tuple[TransferRequest, ...]
    state: DestinationState
    bounds: Bounds
    previous_hw: datetime | None
    reason: str | None
    transfer_id: str
    started: float
    staging: Path = Path()  # the transfer's private folder, chosen when the span is staged
    horizon: SourceHorizon | None = None  # taken before the read; the HW never passes its cap
    cap: HorizonCap | None = None

    def take_horizon(self, horizon: SourceHorizon) -> None:
        self.horizon, self.cap = horizon, horizon_cap(horizon)

    @property
    def first(self) -> TransferRequest:
        return self.requests[0]


@dataclass(frozen=True)
class SpanFailure:
    """A span that did not commit (or not all of it): its uncommitted partitions and why."""

    recipient_id: str
    requests: tuple[TransferRequest, ...]
    error: BaseException


def high_watermark_epoch(record: TransferRecord) -> int | None:
    hw = record.high_watermark
    return None if hw is None else epoch_seconds_floor(hw)

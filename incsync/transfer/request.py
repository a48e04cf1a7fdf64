"""A run's unit of work: the transfer (docs/design.md#vocabulary), one recipient's contiguous windows of a
model read once and published to its destination (docs/design.md#one-transfer).

``TransferRun`` holds what a run's transfers share (the model, its source and Spark, how the run was
launched); ``TransferRequest`` is one (window, recipient) partition, the unit of bookkeeping; a
``Transfer`` is planned once from a run's requests (``TransferPlan``) and passed whole through
``prepare`` (state and bounds), ``reads`` (the lazy read), staging and ``publish`` (validate, attribute
rows to windows, commit); ``PreparedSpan`` is a transfer with its state and bounds, and
``TransferOutcome`` what each of its windows records. ``execute.execute`` runs a plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig, RetryPolicy
from incsync.core.bounds import Bounds, epoch_seconds_floor
from incsync.core.fingerprint import model_fingerprint
from incsync.core.horizon import HorizonCap, SourceHorizon, horizon_cap
from incsync.core.windows import WindowPartition, grid_start, recipient_windows, window_of
from incsync.destinations.base import Destination, DestinationState, TransferRecord
from incsync.sources.base import Source
from incsync.transfer.plan import coalesce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TransferRun:
    """What every transfer of a run shares: the model, its source and Spark, and how the run was launched."""

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

    def plan(self, requests: Sequence[TransferRequest]) -> TransferPlan:
        """The run's transfers: per recipient, each maximal run of contiguous windows (``plan.coalesce``); a
        full refresh reads each recipient's windows as one transfer, gaps included. Order: recipients as
        first seen, each one's transfers by time."""
        whole = frozenset(r.recipient.id for r in requests) if self.full_refresh else frozenset()
        transfers = []
        for span in coalesce(list(requests), whole_recipient=whole):
            one = span.windows[0]  # a span is one recipient's: every window names the same recipient and destination
            transfers.append(Transfer(self, one.recipient, one.destination, span.windows))
        return TransferPlan(self, tuple(transfers))


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """One (window, recipient) partition of a run: what the run's bookkeeping (materializations, failures,
    resume points) names. What a recipient's requests share is held by their ``Transfer``."""

    run: TransferRun
    recipient: RecipientConfig
    destination: Destination
    partition: WindowPartition

    @property
    def model(self) -> ModelConfig:
        return self.run.model

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
class Transfer:
    """One transfer: a recipient's contiguous windows of a run (``requests``, in time order), read once
    from the run's source and published to the recipient's destination. Planned once, then passed whole
    from step to step."""

    run: TransferRun
    recipient: RecipientConfig
    destination: Destination
    requests: tuple[TransferRequest, ...]

    @classmethod
    def alone(cls, request: TransferRequest) -> Transfer:
        """The transfer of one partition by itself (tests and tools)."""
        return cls(request.run, request.recipient, request.destination, (request,))

    @property
    def model(self) -> ModelConfig:
        return self.run.model

    @property
    def windows(self) -> tuple[WindowPartition, ...]:
        return tuple(r.partition for r in self.requests)

    @property
    def start(self) -> datetime:
        return self.requests[0].start

    @property
    def end(self) -> datetime:
        return self.requests[-1].end

    @property
    def what(self) -> str:
        """The transfer as retries and errors name it."""
        return f"model {self.model.model_name}, recipient {self.recipient.id}"

    def whole(self, upper: datetime) -> tuple[TransferRequest, ...]:
        """Every window of the recipient's span up to ``upper`` (exclusive), the given requests among them:
        the windows a full refresh delivers and marks materialized, not only those its run was given
        (docs/design.md#the-partition-view)."""
        given = {r.partition.window_key: r for r in self.requests}
        cells = [WindowPartition(w, self.recipient.id)
                 for w in recipient_windows(self.model, self.recipient, until=upper - timedelta(microseconds=1))
                 if w.key not in given]
        if not cells:
            return self.requests
        made = [TransferRequest(self.run, self.recipient, self.destination, cell) for cell in cells]
        return tuple(sorted([*self.requests, *made], key=lambda r: r.partition.start))

    def without(self, committed: set[object]) -> Transfer:
        """The same transfer over the windows not in ``committed`` (partition keys): what is left to do."""
        return replace(self, requests=tuple(r for r in self.requests if r.partition.key not in committed))


@dataclass(frozen=True)
class TransferPlan:
    """A run's transfers, planned: what a model's asset hands its IO manager (docs/design.md#dagster-shape).
    Plain values: the model's run and, per transfer, its recipient, destination and windows."""

    run: TransferRun
    transfers: tuple[Transfer, ...]

    @property
    def requests(self) -> tuple[TransferRequest, ...]:
        return tuple(r for t in self.transfers for r in t.requests)

    @property
    def recipients(self) -> int:
        return len({t.recipient.id for t in self.transfers})


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
    detailed: bool = True  # ends its commit: its materialization is the commit's record (docs/design.md#bookkeeping)
    record_window: WindowPartition | None = None  # the window whose materialization is the commit's record
    commit: TransferRecord | None = None  # the commit's record, as the destination stores it


OnCommit = Callable[[TransferRequest, TransferOutcome], None]
OnStart = Callable[[Sequence[TransferRequest]], None]


@dataclass
class PreparedSpan:
    """A transfer with its state, bounds and staging folder, decided before anything is read."""

    transfer: Transfer
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
    def requests(self) -> tuple[TransferRequest, ...]:
        return self.transfer.requests


@dataclass(frozen=True)
class SpanFailure:
    """A transfer that did not commit (or not all of it): its uncommitted partitions and why."""

    recipient_id: str
    requests: tuple[TransferRequest, ...]
    error: BaseException

    @classmethod
    def of(cls, transfer: Transfer, error: BaseException) -> SpanFailure:
        return cls(transfer.recipient.id, transfer.requests, error)


def high_watermark_epoch(record: TransferRecord) -> int | None:
    hw = record.high_watermark
    return None if hw is None else epoch_seconds_floor(hw)

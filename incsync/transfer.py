"""One transfer of (model, recipient, contiguous windows): DESIGN "One transfer", steps 1-8, and the
split of its rows back into per-window records ("Transfer plans").
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.bounds import (
    UTC,
    Bounds,
    compute_bounds,
    delta_threshold,
    epoch_seconds_floor,
    from_epoch,
    from_micros,
    new_high_watermark,
    recipient_start,
    to_micros,
)
from incsync.config import ModelConfig, RecipientConfig, RetryPolicy
from incsync.crashpoints import crash_point
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, Destination, DestinationState, Removals, TransferRecord
from incsync.horizon import HorizonCap, SourceHorizon, horizon_cap, horizon_record
from incsync.partitions import WindowPartition
from incsync.sources.base import Source
from incsync.plan import count_by_window, plan_batches
from incsync.retries import with_retries
from incsync.staging import StagedBatch, check_last_modified, claim, last_modified_micros, remove, remove_if_abandoned, slice_batch, stage, validate_and_count

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Batches the source counts at up to this many rows come to Python through Arrow (df.toArrow()) and are
# written to staging here: a Spark write job costs 0.2-0.4 s whatever its size. ~100 bytes a row here.
COLLECT_MAX_ROWS = 50_000


TRANSFER_ID_PATTERN = r"\d{8}T\d{6}Z-[0-9a-f]{12}"


def new_transfer_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}"


def remove_stale_staging(staging_root: Path, model: ModelConfig, recipient: RecipientConfig) -> list[Path]:
    """Remove staging folders that dead transfers of (model, recipient) left behind.

    A live transfer holds its folder's lock (see ``staging.claim``), so only abandoned ones go.
    """
    if not staging_root.is_dir():
        return []
    pattern = re.compile(rf"{re.escape(model.model_name)}-{re.escape(recipient.id)}-{TRANSFER_ID_PATTERN}")
    candidates = [p for p in staging_root.iterdir() if pattern.fullmatch(p.name) and p.is_dir()]
    removed = [path for path in candidates if remove_if_abandoned(path)]
    for path in removed:
        log.warning("removed staging %s left by an interrupted transfer", path)
    return removed


@dataclass
class TransferRequest:
    """One (window, recipient) partition of a run; the asset builds them, the IO manager plans and runs them."""

    model: ModelConfig
    recipient: RecipientConfig
    partition: WindowPartition
    grid_start: datetime
    lookback_seconds: int
    fingerprint: str
    source: Source
    destination: Destination
    spark: Callable[[], SparkSession]
    scheduled: bool = False
    full_refresh: bool = False
    retries: RetryPolicy = field(default_factory=RetryPolicy)
    allow_mass_delete: bool = False  # deletes: a removal past the model's max_delete_fraction goes ahead

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


OnCommit = Callable[[TransferRequest, TransferOutcome], None]


@dataclass
class PreparedSpan:
    """A span's state, bounds and staging folder, decided before anything is read."""

    requests: tuple[TransferRequest, ...]
    state: DestinationState
    bounds: Bounds
    previous_hw: datetime | None
    reason: str | None
    transfer_id: str
    staging: Path
    started: float
    horizon: SourceHorizon | None = None  # taken just before the read; the HW never passes its cap
    cap: HorizonCap | None = None

    def take_horizon(self, horizon: SourceHorizon) -> None:
        self.horizon, self.cap = horizon, horizon_cap(horizon)

    @property
    def first(self) -> TransferRequest:
        return self.requests[0]


def full_refresh_reason(request: TransferRequest, state: DestinationState) -> str | None:
    if request.full_refresh:
        return "requested"
    if state.reset_reason:  # data and transfer log disagree: never continue from a stale HW
        return state.reset_reason
    if state.last_transfer is not None and state.last_transfer.fingerprint != request.fingerprint:
        return f"model_changed ({state.last_transfer.fingerprint} -> {request.fingerprint})"
    return None


def open_window_end(model: ModelConfig, now: datetime) -> datetime:
    """End of the window holding ``now`` (windows are aligned to the UTC epoch)."""
    seconds = model.max_transfer_time_window_seconds
    return from_epoch((epoch_seconds_floor(now) // seconds + 1) * seconds)


def span_bounds(requests: Sequence[TransferRequest], state: DestinationState) -> tuple[Bounds, datetime | None, str | None]:
    """The span's bounds from the destination's state: (bounds, the HW it continues from, full refresh reason)."""
    first, last = requests[0], requests[-1]
    recipient = first.recipient
    model = first.model
    start_r = recipient_start(model, recipient)
    reason = full_refresh_reason(first, state)
    if reason:
        previous_hw = None
        upper = max(last.partition.end, open_window_end(model, datetime.now(UTC)))
        bounds = Bounds(lower=min(start_r, upper), upper=upper, lookback_seconds=first.lookback_seconds, reason="full_refresh")
    else:
        previous_hw = state.high_watermark
        bounds = compute_bounds(
            window_start=first.partition.start,
            window_end=last.partition.end,
            grid_start=first.grid_start,
            recipient_start=start_r,
            high_watermark=previous_hw,
            lookback_seconds=first.lookback_seconds,
            scheduled=first.scheduled,
        )
        if first.scheduled and state.last_transfer is None and first.partition.start > max(start_r, first.grid_start):
            # A schedule tick finds no transfer record past the recipient's first window: a destination
            # wiped whole (folder, schema or prefix deleted) or a recipient whose backfill never ran.
            # Reading only this tick's windows would leave everything before them out, silently.
            reason = "no_transfer_record (the destination holds no transfer: re-synced from the recipient's start)"
    if reason and bounds.reason != "full_refresh":
        previous_hw = None
        upper = max(last.partition.end, open_window_end(model, datetime.now(UTC)))
        bounds = Bounds(lower=min(start_r, upper), upper=upper, lookback_seconds=first.lookback_seconds, reason="full_refresh")
    return bounds, previous_hw, reason


def prepare(requests: Sequence[TransferRequest], *, staging_root: Path) -> PreparedSpan:
    """Read the destination's state and bound the span: ``[L(first window), U(last window))``.

    A full refresh reads ``[start, end of the open window)``: one transfer, published once.
    """
    first, last = requests[0], requests[-1]
    model, recipient = first.model, first.recipient
    state = with_retries(
        lambda: first.destination.read_state(model=model, recipient=recipient), policy=first.retries,
        what=f"reading destination {first.destination.name} for model {model.model_name}, recipient {recipient.id}",
    )
    bounds, previous_hw, reason = span_bounds(requests, state)
    remove_stale_staging(staging_root, model, recipient)
    transfer_id = new_transfer_id()
    staging = staging_root / f"{model.model_name}-{recipient.id}-{transfer_id}"
    log.info(
        "transfer %s: model %s recipient %s, %s window(s) [%s, %s), bounds [%s, %s) (%s)",
        transfer_id, model.model_name, recipient.id, len(requests), first.partition.start, last.partition.end,
        bounds.lower, bounds.upper, bounds.reason,
    )
    return PreparedSpan(
        requests=tuple(requests), state=state, bounds=bounds, previous_hw=previous_hw, reason=reason,
        transfer_id=transfer_id, staging=staging, started=time.monotonic(),
    )


def extract(span: PreparedSpan) -> StagedBatch:
    """Read the span's rows once (pushed down) and stage them in its private folder."""
    first = span.first
    model, recipient = first.model, first.recipient
    # The safe horizon, asked before anything is read: the HW will not pass it (DESIGN step 6).
    span.take_horizon(first.source.horizon(first.spark, model=model, recipient=recipient))
    # A cheap count first: a span with no row in bounds then costs no Spark job, a small one a collect
    # through Arrow instead of a Parquet write job (either batch is validated, counted and recorded alike).
    count = first.source.count_rows(model=model, recipient=recipient, bounds=span.bounds, cap=COLLECT_MAX_ROWS)
    if count == 0:
        log.info("transfer %s: the source has no row in bounds; Spark staging skipped", span.transfer_id)
    df = first.source.read(first.spark(), model=model, recipient=recipient, bounds=span.bounds, rows_hint=count)
    return stage(df, span.staging, known_empty=count == 0, collect=count is not None and count <= COLLECT_MAX_ROWS)


def publish_span(span: PreparedSpan, batch: StagedBatch, *, on_commit: OnCommit) -> None:
    """Validate the span's rows, attribute them to windows, publish them in size-bounded commits in order.

    Every window lies in exactly one commit; ``on_commit`` hears of each window once its commit landed.
    """
    first = span.first
    model, recipient, destination = first.model, first.recipient, first.destination
    threshold = delta_threshold(span.previous_hw)
    check_last_modified(batch, model=model, recipient_id=recipient.id)
    windows = [r.partition for r in span.requests]
    counts = count_by_window(
        windows, last_modified_micros(batch, model.last_modified_column),
        delta_after_micros=None if threshold is None else to_micros(threshold),
    )
    splits = [range(len(windows))] if span.reason else plan_batches(counts.rows, model.max_rows_per_batch)
    columns = tuple((f.name, str(f.type)) for f in batch.schema)
    removals = None
    if model.deletes != "none" and not span.reason:  # a full refresh replaces the rows anyway
        from incsync.integrity.deletes import find_removals

        removals = find_removals(first.source, destination, model=model, recipient=recipient, spark=first.spark,
                                 staging_root=span.staging.parent, allowed=first.allow_mass_delete)
    hw, state = span.previous_hw, span.state
    for k, indexes in enumerate(splits):
        lo, hi = indexes.start, indexes.stop - 1
        is_first, is_last = k == 0, k == len(splits) - 1
        lower = span.bounds.lower if is_first else windows[lo].start
        upper = span.bounds.upper if is_last else windows[hi].end
        part = batch if len(splits) == 1 else slice_batch(
            batch, span.staging.with_name(f"{span.staging.name}-b{k + 1}"), model.last_modified_column,
            lower=None if is_first else windows[lo].start, upper=None if is_last else windows[hi].end,
        )
        try:
            validate_and_count(part, model=model, recipient_id=recipient.id, delta_threshold=threshold)
        except Exception:
            if part is not batch:
                remove(part.path)
            raise
        crash_point("after_staging")
        tops = [m for m in counts.max_micros[lo : hi + 1] if m is not None]
        batch_max = from_micros(max(tops)) if tops else None
        previous = hw
        hw = new_high_watermark(hw, batch_max, span.cap.cap if span.cap else None)
        horizon_facts = horizon_record(
            span.horizon, span.cap, previous=previous, batch=part, column=model.last_modified_column, batch_max=batch_max
        ) if span.horizon and span.cap else {}
        transfer_id = span.transfer_id if len(splits) == 1 else f"{span.transfer_id}-b{k + 1}"
        record = TransferRecord(
            transfer_id=transfer_id,
            model_name=model.model_name,
            recipient_id=recipient.id,
            window_start=windows[lo].start.isoformat(),
            window_end=windows[hi].end.isoformat(),
            lower_bound=lower.isoformat(),
            upper_bound=upper.isoformat(),
            rows_transferred=sum(counts.rows[lo : hi + 1]),
            delta_rows_transferred=sum(counts.delta_rows[lo : hi + 1]),
            high_watermark_micros=None if hw is None else to_micros(hw),
            transfer_type=FULL_REFRESH if span.reason else INCREMENTAL,
            fingerprint=first.fingerprint,
            lookback_seconds=first.lookback_seconds,
            committed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            extra={**({"full_refresh_reason": span.reason} if span.reason else {}), **horizon_facts,
                   **({"rows_removed": str(removals.rows), "removal_mode": removals.mode} if removals and is_last else {})},
        )
        # Soft: every publish goes with its removals (even none), so a key back at the source loses its stamp.
        remove_now = removals if removals is not None and (removals.rows or removals.mode == "soft") and is_last else None
        try:
            destination_metadata = publish_with_retries(first, part, record, expected=state, removals=remove_now)
            if removals is not None and is_last:
                destination_metadata = {**destination_metadata, "rows_removed": removals.rows, "removal_mode": removals.mode}
        finally:
            if part is not batch:
                remove(part.path)
        crash_point("after_publish")
        if not is_last:
            state = destination.read_state(model=model, recipient=recipient)
        batch_bounds = Bounds(lower=lower, upper=upper, lookback_seconds=span.bounds.lookback_seconds, reason=span.bounds.reason)
        for i in indexes:
            window_record = replace(
                record,
                window_start=windows[i].start.isoformat(),
                window_end=windows[i].end.isoformat(),
                rows_transferred=counts.rows[i],
                delta_rows_transferred=counts.delta_rows[i],
            )
            on_commit(span.requests[i], TransferOutcome(
                record=replace(window_record, transfer_id=span.transfer_id),
                bounds=batch_bounds,
                staged_bytes=part.bytes,
                duration_seconds=time.monotonic() - span.started,
                full_refresh_reason=span.reason,
                destination_metadata=destination_metadata,
                # The schema goes with windows that hold rows and with the commit's last window, not with
                # every empty window: at ~400 windows a recipient it doubled the cost of storing the events.
                columns=columns if counts.rows[i] or i == indexes[-1] else (),
                windows_in_transfer=len(windows),
                batch=None if len(splits) == 1 else f"{k + 1}/{len(splits)}",
                commit_rows=record.rows_transferred,
                first_of_commit=i == lo,
                last_of_commit=i == indexes[-1],
            ))


def publish_with_retries(
    request: TransferRequest, batch: StagedBatch, record: TransferRecord, *, expected: DestinationState,
    removals: Removals | None = None,
) -> dict[str, object]:
    """Publish, trying again on a transient error. A connection lost while committing leaves it unknown
    whether the commit landed: the destination's transfer log says, so a landed commit is never redone."""
    model, recipient, destination = request.model, request.recipient, request.destination
    tries = 0

    def attempt() -> dict[str, object]:
        nonlocal tries
        tries += 1
        if tries > 1:
            landed = destination.read_state(model=model, recipient=recipient).last_transfer
            if landed is not None and landed.transfer_id == record.transfer_id:
                log.warning("transfer %s: its commit to %s landed before the connection was lost", record.transfer_id, destination.name)
                return {"publish_attempts": tries}
        return destination.publish(model=model, recipient=recipient, batch=batch, record=record, expected=expected,
                                   **({"removals": removals} if removals is not None else {}))

    metadata = with_retries(
        attempt, policy=request.retries,
        what=f"publish of transfer {record.transfer_id} to destination {destination.name} "
        f"(model {model.model_name}, recipient {recipient.id})",
    )
    return {**metadata, "publish_attempts": tries} if tries > 1 else metadata


def extract_with_retries(span: PreparedSpan) -> StagedBatch:
    """``extract``, read again from the start (staging emptied) when the source fails transiently."""
    first = span.first
    return with_retries(
        lambda: extract(span), policy=first.retries, before_retry=lambda: remove(span.staging),
        what=f"read of source {first.model.source} for model {first.model.model_name}, recipient {first.recipient.id}",
    )


def run_span(requests: Sequence[TransferRequest], *, staging_root: Path, on_commit: OnCommit) -> None:
    """One transfer over contiguous windows of one recipient: prepare, extract, stage once, publish.

    The staging folder is removed on the way out, success or not.
    """
    span = prepare(requests, staging_root=staging_root)
    with claim(span.staging):
        batch = extract_with_retries(span)
        publish_span(span, batch, on_commit=on_commit)


def run_transfer(request: TransferRequest, *, staging_root: Path) -> TransferOutcome:
    """One window alone (tests and tools): the span of a single partition."""
    outcomes: list[TransferOutcome] = []
    run_span([request], staging_root=staging_root, on_commit=lambda _r, o: outcomes.append(o))
    return outcomes[0]


def high_watermark_epoch(record: TransferRecord) -> int | None:
    hw = record.high_watermark
    return None if hw is None else epoch_seconds_floor(hw)

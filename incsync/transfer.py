"""One transfer of (model, recipient, window): DESIGN "One transfer", steps 1-8."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.changes import (
    Bounds,
    compute_bounds,
    delta_threshold,
    epoch_seconds_floor,
    from_epoch,
    new_high_watermark,
    to_micros,
)
from incsync.config import ModelConfig, RecipientConfig
from incsync.crashpoints import crash_point
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, Destination, TransferRecord
from incsync.horizon import horizon_cap, horizon_record
from incsync.partitions import WindowPartition
from incsync.sources.base import Source
from incsync.staging import claim, remove_if_abandoned, stage, validate_and_count

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Batches the source counts at up to this many rows come to Python through Arrow (df.toArrow()) and are
# written to staging here: a Spark write job costs 0.2-0.4 s whatever its size. ~100 bytes a row here.
COLLECT_MAX_ROWS = 50_000


def recipient_start(model: ModelConfig, recipient: RecipientConfig) -> datetime:
    """Where a recipient's data starts: its own override, else the model's."""
    epoch = recipient.default_full_refresh_min_start_time_epoch
    return from_epoch(model.min_start_time_epoch if epoch is None else epoch)


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
    candidates = [p for p in staging_root.iterdir() if p.is_dir() and pattern.fullmatch(p.name)]
    removed = [path for path in candidates if remove_if_abandoned(path)]
    for path in removed:
        log.warning("removed staging %s left by an interrupted transfer", path)
    return removed


@dataclass
class TransferRequest:
    """Everything one transfer needs; the asset builds it, the IO manager runs it."""

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


@dataclass(frozen=True)
class TransferOutcome:
    """A committed transfer and what it cost."""

    record: TransferRecord
    bounds: Bounds
    staged_bytes: int
    duration_seconds: float
    full_refresh_reason: str | None
    destination_metadata: dict[str, object] = field(default_factory=dict)
    columns: tuple[tuple[str, str], ...] = ()  # (name, Arrow type) of the published batch


def run_transfer(request: TransferRequest, *, staging_root: Path) -> TransferOutcome:
    """Read state, bound, extract, stage once, validate, count, publish; staging removed always."""
    started = time.monotonic()
    model, recipient, window = request.model, request.recipient, request.partition
    state = request.destination.read_state(model=model, recipient=recipient)
    start_r = recipient_start(model, recipient)

    reason = None
    if request.full_refresh:
        reason = "requested"
    elif state.last_transfer is not None and state.last_transfer.fingerprint != request.fingerprint:
        reason = f"model_changed ({state.last_transfer.fingerprint} -> {request.fingerprint})"

    if reason:
        previous_hw = None
        bounds = Bounds(lower=start_r, upper=window.end, lookback_seconds=request.lookback_seconds, reason="full_refresh")
    else:
        previous_hw = state.high_watermark
        bounds = compute_bounds(
            window_start=window.start,
            window_end=window.end,
            grid_start=request.grid_start,
            recipient_start=start_r,
            high_watermark=previous_hw,
            lookback_seconds=request.lookback_seconds,
            scheduled=request.scheduled,
        )

    remove_stale_staging(staging_root, model, recipient)
    transfer_id = new_transfer_id()
    staging = staging_root / f"{model.model_name}-{recipient.id}-{transfer_id}"
    log.info(
        "transfer %s: model %s recipient %s window [%s, %s) bounds [%s, %s) (%s)",
        transfer_id, model.model_name, recipient.id, window.start, window.end, bounds.lower, bounds.upper, bounds.reason,
    )
    with claim(staging):  # removes the staging folder on the way out, success or not
        # The safe horizon, asked before anything is read: the HW will not pass it (DESIGN step 6, issue 20).
        horizon = request.source.horizon(request.spark, model=model, recipient=recipient)
        cap = horizon_cap(horizon)

        # A cheap count first: a window with no row in bounds then costs no Spark job, a small one a collect
        # through Arrow instead of a Parquet write job (either batch is validated, counted and recorded alike).
        count = request.source.count_rows(model=model, recipient=recipient, bounds=bounds, cap=COLLECT_MAX_ROWS)
        df = request.source.read(request.spark(), model=model, recipient=recipient, bounds=bounds, rows_hint=count)
        batch = stage(df, staging, known_empty=count == 0, collect=count is not None and count <= COLLECT_MAX_ROWS)
        if count == 0:
            log.info("transfer %s: the source has no row in bounds; Spark staging skipped", transfer_id)
        facts = validate_and_count(batch, model=model, recipient_id=recipient.id, delta_threshold=delta_threshold(previous_hw))
        crash_point("after_staging")
        hw = new_high_watermark(previous_hw, facts.max_last_modified, cap.cap)
        horizon_facts = horizon_record(
            horizon, cap, previous=previous_hw, batch=batch, column=model.last_modified_column, batch_max=facts.max_last_modified
        )
        record = TransferRecord(
            transfer_id=transfer_id,
            model_name=model.model_name,
            recipient_id=recipient.id,
            window_start=window.start.isoformat(),
            window_end=window.end.isoformat(),
            lower_bound=bounds.lower.isoformat(),
            upper_bound=bounds.upper.isoformat(),
            rows_transferred=facts.rows,
            delta_rows_transferred=facts.delta_rows,
            high_watermark_micros=None if hw is None else to_micros(hw),
            transfer_type=FULL_REFRESH if reason else INCREMENTAL,
            fingerprint=request.fingerprint,
            lookback_seconds=request.lookback_seconds,
            committed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            extra={**({"full_refresh_reason": reason} if reason else {}), **horizon_facts},
        )
        destination_metadata = request.destination.publish(
            model=model, recipient=recipient, batch=batch, record=record, expected=state
        )
        staged_bytes = batch.bytes
        columns = tuple((f.name, str(f.type)) for f in batch.schema)
        crash_point("after_publish")
    return TransferOutcome(
        record=record,
        bounds=bounds,
        staged_bytes=staged_bytes,
        duration_seconds=time.monotonic() - started,
        full_refresh_reason=reason,
        destination_metadata=destination_metadata,
        columns=columns,
    )


def high_watermark_epoch(record: TransferRecord) -> int | None:
    hw = record.high_watermark
    return None if hw is None else epoch_seconds_floor(hw)

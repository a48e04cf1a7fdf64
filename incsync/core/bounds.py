"""Pure transfer arithmetic: bounds, watermarks and counts. No Spark, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Protocol

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_epoch(seconds: int | float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


class ModelStart(Protocol):
    """Where a model's data starts (a model of the configuration is one)."""

    @property
    def min_start_time_epoch(self) -> int: ...


class RecipientStart(Protocol):
    """A recipient's own start, when it has one (a recipient of the configuration is one)."""

    @property
    def default_full_refresh_min_start_time_epoch(self) -> int | None: ...


def recipient_start(model: ModelStart, recipient: RecipientStart) -> datetime:
    """Where a recipient's data starts: its own override, else the model's."""
    epoch = recipient.default_full_refresh_min_start_time_epoch
    return from_epoch(model.min_start_time_epoch if epoch is None else epoch)


def to_micros(ts: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime."""
    delta = ts.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def floor_to_second(ts: datetime) -> datetime:
    return ts.replace(microsecond=0)


def epoch_seconds_floor(ts: datetime) -> int:
    """The epoch-second form of a watermark, rounded down so no row is ever skipped."""
    return to_micros(ts) // 1_000_000


@dataclass(frozen=True)
class Bounds:
    """The half-open range ``[lower, upper)`` of last-modified values one transfer reads."""

    lower: datetime
    upper: datetime
    lookback_seconds: int
    reason: str

    @property
    def is_empty(self) -> bool:
        return self.lower >= self.upper


def compute_bounds(
    *,
    window_start: datetime,
    window_end: datetime,
    grid_start: datetime,
    recipient_start: datetime,
    high_watermark: datetime | None,
    lookback_seconds: int,
    scheduled: bool,
) -> Bounds:
    """The bounds of a span (docs/design.md#bounds).

    - scheduled run of the window holding the HW (a repeat run of the open window):
      ``L = floor(HW) - lookback``, never below ``window_start - lookback``;
    - scheduled run of windows after the HW: ``L = floor(HW) - lookback`` (what changed since the HW);
    - otherwise the first window of the recipient's grid: ``L = recipient_start``, no lookback below it;
    - anything else (backfills, hand-launched runs): ``L = window_start - lookback``.

    ``L`` never goes below the recipient's start (rows modified earlier are out of scope) and
    never above ``U = window_end``. The repeat rule comes first even in the recipient's first
    window, so a new recipient's open window is not re-read whole on every tick: the clamp at the
    recipient's start keeps the first rule's "no lookback below it" (docs/design.md#departures).
    """
    lookback = timedelta(seconds=lookback_seconds)
    upper = window_end
    is_first = recipient_start < window_end and (recipient_start >= window_start or window_start <= grid_start)
    if scheduled and high_watermark is not None and window_start <= high_watermark < window_end:
        lower = max(floor_to_second(high_watermark) - lookback, window_start - lookback)
        reason = "repeat_of_open_window"
    elif scheduled and high_watermark is not None and high_watermark < window_start:
        # The HW lies before the run's windows: a tick after a pause, or a HW held back by a long
        # transaction (the safe horizon) in a window the tick no longer runs. What changed since the
        # HW is what the tick must move; the whole window would miss the rows between.
        lower, reason = floor_to_second(high_watermark) - lookback, "since_high_watermark"
    elif is_first:
        lower, reason = recipient_start, "first_window"
    else:
        lower, reason = window_start - lookback, "whole_window"
    lower = min(max(lower, recipient_start), upper)
    return Bounds(lower=lower, upper=upper, lookback_seconds=lookback_seconds, reason=reason)


def new_high_watermark(
    previous: datetime | None, batch_max: datetime | None, cap: datetime | None = None
) -> datetime | None:
    """``max(previous, min(batch_max, cap))``: the HW never moves backwards, never names data that is not
    in the batch or before it, and never passes ``cap`` (the extraction's start and the source's safe
    horizon, see ``incsync.core.horizon``), so rows beyond the cap are read again by the next run."""
    if batch_max is not None and cap is not None:
        batch_max = min(batch_max, cap)
    candidates = [ts for ts in (previous, batch_max) if ts is not None]
    return max(candidates) if candidates else None


def delta_threshold(previous: datetime | None) -> datetime | None:
    """Rows strictly newer than this count as ``delta_rows_transferred`` (None: all rows)."""
    return None if previous is None else from_epoch(epoch_seconds_floor(previous))



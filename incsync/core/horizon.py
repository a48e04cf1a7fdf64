"""The safe horizon (docs/design.md#safe-horizon): how far the HW may move after one extraction.

A row written by a transaction still open at extraction is invisible to it, yet may be dated as early
as that transaction's start (PostgreSQL's ``now()``). The HW therefore never passes the start of the
oldest transaction still open, nor the extraction's own start (rows dated in the future), so the next
run's ``floor(HW) - lookback`` still reaches those rows. Pure values; the sources measure them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

TRANSACTIONS = "transactions"  # the oldest open transaction of other sessions holds the HW back
REPLICA = "replica"  # a replica: its replay lag holds the HW back (the primary's sessions are not visible)
LOOKBACK_ONLY = "lookback-only"  # other sessions cannot be seen (no grant, lake source): the lookback alone
OFF = "off"  # turned off in the configuration (`safe_horizon: false`)
DEFAULT_MAX_HORIZON_LAG_SECONDS = 3600

log = logging.getLogger(__name__)


class Rows(Protocol):
    """Rows that can be read as an Arrow table, some columns only (a staged batch is one)."""

    def table(self, columns: list[str] | None = None) -> pa.Table: ...


@dataclass(frozen=True)
class SourceHorizon:
    """What a source reports just before extraction, by the source's own clock."""

    extraction_start: datetime
    mode: str = LOOKBACK_ONLY
    oldest_open: datetime | None = None  # start of the oldest transaction of another session still open
    # start of the oldest one no older than max_lag_seconds: it holds the HW when an older one no longer does
    oldest_within_lag: datetime | None = None
    replica_lag_seconds: float | None = None  # a replica's replay lag (None: not a replica, or unknown)
    max_lag_seconds: int = DEFAULT_MAX_HORIZON_LAG_SECONDS
    note: str | None = None  # why the horizon is lookback-only, e.g. the missing grant
    # Transactions begun this recently may be missing from the source's list (InnoDB serves innodb_trx
    # from a cache): the cap stays this far behind the extraction's start, which stays the clock's
    # reading so that rows dated in those seconds are not taken for future-dated ones.
    unlisted_seconds: float = 0.0


@dataclass(frozen=True)
class HorizonCap:
    """The latest time the HW may take after this extraction, and a warning when a lag was ignored."""

    cap: datetime
    warning: str | None = None


def horizon_cap(horizon: SourceHorizon) -> HorizonCap:
    """``min(extraction start - replica lag (or - unlisted seconds), oldest open transaction start)``.

    A transaction (or a replica lag) older than ``max_lag_seconds`` no longer holds the HW back: its rows
    are then left to the lookback, and the warning says how old it was. Transactions open beside it that
    are younger than that still hold it (``oldest_within_lag``).
    """
    start = horizon.extraction_start
    cap, warnings = start, []
    if horizon.mode == TRANSACTIONS and horizon.unlisted_seconds > 0:
        cap = start - timedelta(seconds=horizon.unlisted_seconds)
    max_lag = horizon.max_lag_seconds
    lag = horizon.replica_lag_seconds
    if horizon.mode in (TRANSACTIONS, REPLICA) and lag is not None and lag > 0:
        if lag <= max_lag:
            cap = start - timedelta(seconds=lag)
        else:
            warnings.append(f"the replica replays {lag:.0f} s behind its primary, more than max_horizon_lag ({max_lag} s)")
    oldest = horizon.oldest_open
    if horizon.mode == TRANSACTIONS and oldest is not None and oldest < cap:
        age = (start - oldest).total_seconds()
        if age <= max_lag:
            cap = oldest
        else:
            warnings.append(
                f"a transaction open since {oldest.isoformat()} ({age:.0f} s) is older than max_horizon_lag "
                f"({max_lag} s) and no longer holds the high watermark back; rows it writes are left to the lookback"
            )
            held = horizon.oldest_within_lag  # a younger transaction open beside it still holds the HW
            if held is not None and held < cap:
                cap = held
    return HorizonCap(cap=cap, warning="; ".join(warnings) or None)


def held_back_seconds(previous: datetime | None, batch_max: datetime | None, cap: datetime | None) -> float:
    """How far the cap held the HW behind the batch's newest row (0 when it did not)."""
    if batch_max is None or cap is None or batch_max <= cap:
        return 0.0
    uncapped = batch_max if previous is None else max(previous, batch_max)
    capped = cap if previous is None else max(previous, cap)
    return max((uncapped - capped).total_seconds(), 0.0)


def future_dated_rows(batch: Rows, *, column: str, extraction_start: datetime, batch_max: datetime | None) -> int:
    """Rows of the staged batch dated after the extraction started (by the source's clock).

    They are transferred now and, since the HW stays at or below the extraction's start, read again
    when their time comes. The staged column is read only when the batch's newest row is that late.
    """
    if batch_max is None or batch_max <= extraction_start:
        return 0
    import pyarrow as pa
    import pyarrow.compute as pc

    values = batch.table(columns=[column])[column]
    return int(pc.sum(pc.greater(values, pa.scalar(extraction_start, values.type))).as_py() or 0)


SOURCE_HORIZON = "source_horizon"
HORIZON = "horizon"
HELD_BACK_SECONDS = "horizon_held_back_seconds"
FUTURE_DATED_ROWS = "future_dated_rows"
HORIZON_WARNING = "horizon_warning"


def horizon_record(
    horizon: SourceHorizon, cap: HorizonCap, *, previous: datetime | None, batch: Rows, column: str,
    batch_max: datetime | None,
) -> dict[str, str]:
    """What the transfer record (and so the materialization's metadata) says about the horizon."""
    facts = {
        HORIZON: horizon.mode,
        SOURCE_HORIZON: cap.cap.isoformat(),
        HELD_BACK_SECONDS: f"{held_back_seconds(previous, batch_max, cap.cap):.6f}",
        FUTURE_DATED_ROWS: str(
            future_dated_rows(batch, column=column, extraction_start=horizon.extraction_start, batch_max=batch_max)
        ),
    }
    if cap.warning:
        log.warning("safe horizon: %s", cap.warning)
    if cap.warning or horizon.note:
        facts[HORIZON_WARNING] = "; ".join(x for x in (horizon.note, cap.warning) if x)
    return facts

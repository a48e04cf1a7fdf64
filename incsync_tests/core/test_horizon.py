"""The safe horizon's arithmetic (docs/design.md#safe-horizon): the HW cap, its lag limit, the counts."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from incsync.core.bounds import UTC, compute_bounds, delta_threshold, floor_to_second, new_high_watermark
from incsync.core.horizon import (
    LOOKBACK_ONLY,
    OFF,
    TRANSACTIONS,
    SourceHorizon,
    future_dated_rows,
    held_back_seconds,
    horizon_cap,
)
from incsync.staging.spark import stage

T0 = datetime(2024, 1, 1, 12, tzinfo=UTC)
times = st.integers(0, 7_200_000_000).map(lambda us: T0 + timedelta(microseconds=us))
maybe_times = st.none() | times


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


CAP_CASES = [
    # id, horizon, expected cap, expected warning fragment
    ("nothing-open", SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS), at(100), None),
    ("open-transaction-holds-back", SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, oldest_open=at(55)), at(55), None),
    ("exactly-max-lag-still-holds", SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, oldest_open=at(40), max_lag_seconds=60), at(40), None),
    (
        "older-than-max-lag-is-ignored",
        SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, oldest_open=at(39), max_lag_seconds=60),
        at(100),
        "a transaction open since 2024-01-01T12:00:39+00:00 (61 s) is older than max_horizon_lag (60 s)",
    ),
    (
        "older-than-max-lag-lets-a-younger-one-hold",
        SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, oldest_open=at(39), oldest_within_lag=at(99), max_lag_seconds=60),
        at(99),
        "a transaction open since 2024-01-01T12:00:39+00:00 (61 s) is older than max_horizon_lag (60 s)",
    ),
    ("lookback-only-ignores-transactions", SourceHorizon(extraction_start=at(100), mode=LOOKBACK_ONLY, oldest_open=at(55)), at(100), None),
    ("off-ignores-transactions", SourceHorizon(extraction_start=at(100), mode=OFF, oldest_open=at(55)), at(100), None),
    ("replica-lag", SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, replica_lag_seconds=7.5), at(92.5), None),
    ("replica-lag-and-older-transaction", SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, oldest_open=at(80), replica_lag_seconds=5), at(80), None),
    (
        "replica-lag-beyond-max-lag",
        SourceHorizon(extraction_start=at(100), mode=TRANSACTIONS, replica_lag_seconds=120, max_lag_seconds=60),
        at(100),
        "the replica replays 120 s behind its primary, more than max_horizon_lag (60 s)",
    ),
]


@pytest.mark.parametrize(("horizon", "cap", "warning"), [c[1:] for c in CAP_CASES], ids=[c[0] for c in CAP_CASES])
def test_horizon_cap(horizon: SourceHorizon, cap: datetime, warning: str | None) -> None:
    got = horizon_cap(horizon)
    assert got.cap == cap
    if warning is None:
        assert got.warning is None
    else:
        assert got.warning is not None and got.warning.startswith(warning)


HW_CASES = [
    # id, previous, batch max, cap, new HW, held back (s)
    ("below-cap-moves-to-batch-max", at(10), at(50), at(60), at(50), 0.0),
    ("issue-20-held-at-open-transaction", at(10), at(45), at(0.5), at(10), 35.0),
    ("held-at-cap", at(10), at(45), at(30), at(30), 15.0),
    ("first-transfer-held-at-cap", None, at(45), at(30), at(30), 15.0),
    ("never-backwards", at(40), at(45), at(30), at(40), 5.0),
    ("empty-batch-keeps-previous", at(40), None, at(30), at(40), 0.0),
    ("no-cap-is-plain-max", at(10), at(45), None, at(45), 0.0),
]


@pytest.mark.parametrize(("previous", "batch_max", "cap", "hw", "held"), [c[1:] for c in HW_CASES], ids=[c[0] for c in HW_CASES])
def test_new_high_watermark_with_cap(previous, batch_max, cap, hw, held) -> None:
    assert new_high_watermark(previous, batch_max, cap) == hw
    assert held_back_seconds(previous, batch_max, cap) == held


@given(previous=maybe_times, batch_max=maybe_times, cap=times)
def test_hw_rule_properties(previous, batch_max, cap) -> None:
    hw = new_high_watermark(previous, batch_max, cap)
    uncapped = new_high_watermark(previous, batch_max)
    if previous is not None:
        assert hw is not None and hw >= previous  # never backwards
    if hw is not None and (previous is None or hw > previous):
        assert hw <= cap  # it moved, so it moved to at most the cap
    assert (hw is None) == (uncapped is None)
    if uncapped is not None:
        assert hw <= uncapped  # the cap only ever holds back
        assert held_back_seconds(previous, batch_max, cap) == pytest.approx((uncapped - hw).total_seconds())
    if batch_max is not None and batch_max <= cap:
        assert hw == uncapped


@given(
    start=times,
    age_us=st.integers(0, 10_000_000_000),
    younger_us=st.none() | st.integers(0, 10_000_000_000),
    max_lag=st.integers(0, 7200),
    lag=st.none() | st.floats(0, 5000, allow_nan=False),
)
def test_cap_properties(start, age_us, younger_us, max_lag, lag) -> None:
    oldest = start - timedelta(microseconds=age_us)
    younger = None if younger_us is None else start - timedelta(microseconds=min(younger_us, age_us))  # a second open transaction
    within = [t for t in (oldest, younger) if t is not None and start - t <= timedelta(seconds=max_lag)]
    got = horizon_cap(SourceHorizon(
        extraction_start=start, mode=TRANSACTIONS, oldest_open=oldest, oldest_within_lag=min(within, default=None),
        replica_lag_seconds=lag, max_lag_seconds=max_lag,
    ))
    assert got.cap <= start  # never past the extraction's start
    assert got.cap >= start - timedelta(seconds=max_lag)  # never held back further than max_horizon_lag
    for t in within:  # every transaction within the lag holds the HW, whatever older one is open beside it
        assert got.cap <= t
    if age_us > max_lag * 1_000_000:
        assert got.warning is not None and "older than max_horizon_lag" in got.warning


@given(
    previous=times,
    oldest_us=st.integers(0, 7_200_000_000),
    batch=st.lists(times, max_size=6),
    lookback=st.integers(0, 30),
)
def test_a_row_of_a_transaction_open_at_extraction_is_read_next_time(previous, oldest_us, batch, lookback) -> None:
    """Issue 20's hole, as arithmetic: whatever the batch held, a row dated at (or after) the start of a
    transaction still open at extraction lies at or above the next run's lower bound ``floor(HW) - lookback``,
    provided the previous HW already respected that transaction (it was open then too)."""
    oldest = T0 + timedelta(microseconds=oldest_us)
    if previous > oldest:
        previous = oldest
    start = max([oldest, *batch]) + timedelta(seconds=1)
    cap = horizon_cap(SourceHorizon(extraction_start=start, mode=TRANSACTIONS, oldest_open=oldest, max_lag_seconds=86_400)).cap
    hw = new_high_watermark(previous, max(batch, default=None), cap)
    assert hw is not None and floor_to_second(hw) - timedelta(seconds=lookback) <= oldest


HOUR = 3_600_000_000


@given(
    start_us=st.integers(0, HOUR - 1),
    previous_us=st.none() | st.integers(0, HOUR - 1),
    batch_us=st.lists(st.integers(-300_000_000, HOUR - 1), max_size=6),
    lookback=st.integers(0, 300),
)
def test_rows_dated_ahead_never_hide_rows_written_after_the_extraction(start_us, previous_us, batch_us, lookback) -> None:
    """The open window [T0, T0 + 1 h) is read by a scheduled run whose extraction starts at ``start``; the
    batch may hold rows dated after it (the future). The new HW stays at or below ``start``, so the next
    scheduled run of the window reads every row written from then on (dated ``start`` or later) and reads
    the future rows again; they are newer than the HW, so they count in ``delta_rows_transferred`` again."""
    start = T0 + timedelta(microseconds=start_us)
    previous = None if previous_us is None else T0 + timedelta(microseconds=min(previous_us, start_us))  # an earlier run's
    batch = [T0 + timedelta(microseconds=u) for u in batch_us]
    cap = horizon_cap(SourceHorizon(extraction_start=start, mode=LOOKBACK_ONLY)).cap
    hw = new_high_watermark(previous, max(batch, default=None), cap)
    assert hw is None or hw <= start
    following = compute_bounds(
        window_start=T0, window_end=T0 + timedelta(hours=1), grid_start=T0 - timedelta(days=1),
        recipient_start=T0 - timedelta(days=1), high_watermark=hw, lookback_seconds=lookback, scheduled=True,
    )
    assert following.lower <= start < following.upper  # a row written now, dated now, is read
    threshold = delta_threshold(hw)
    for row in (r for r in batch if r > start):  # dated ahead: read again, and counted as new again
        assert following.lower <= row < following.upper
        assert threshold is None or row > threshold


def test_future_dated_rows_are_counted_from_the_staged_batch(tmp_path: Path) -> None:
    table = pa.table({
        "id": [1, 2, 3, 4],
        "updated_at": pa.array([at(10), at(100), at(100.000001), at(5000)], type=pa.timestamp("us", tz="UTC")),
    })
    batch = stage(table, tmp_path / "batch")
    assert future_dated_rows(batch, column="updated_at", extraction_start=at(100), batch_max=at(5000)) == 2
    assert future_dated_rows(batch, column="updated_at", extraction_start=at(5000), batch_max=at(5000)) == 0
    assert future_dated_rows(batch, column="updated_at", extraction_start=at(1), batch_max=None) == 0


def test_postgres_horizon_row_on_a_primary_a_replica_and_without_the_grant() -> None:
    from incsync.core.horizon import REPLICA
    from incsync.sources.jdbc.horizon import postgres_horizon

    now_us = int(at(100).timestamp() * 1e6)
    primary = {"now_us": now_us, "oldest_us": now_us - 45_000_000, "sees_all": True, "replica": False, "replica_lag_us": None}
    got = postgres_horizon(primary, user="reader", max_lag_seconds=3600)
    assert (got.mode, got.extraction_start, got.oldest_open, got.note) == (TRANSACTIONS, at(100), at(55), None)
    assert horizon_cap(got).cap == at(55)

    # The oldest is past max_horizon_lag; a younger one, within it, holds the HW.
    both = postgres_horizon({**primary, "oldest_us": now_us - 90_000_000, "held_us": now_us - 20_000_000}, user="reader", max_lag_seconds=60)
    assert (both.oldest_open, both.oldest_within_lag, horizon_cap(both).cap) == (at(10), at(80), at(80))

    blind = postgres_horizon({**primary, "sees_all": False}, user="reader", max_lag_seconds=3600)
    assert blind.mode == LOOKBACK_ONLY and horizon_cap(blind).cap == at(100)
    assert blind.note is not None and "GRANT pg_read_all_stats TO reader" in blind.note

    # A replica: its own sessions cannot write, so only the replay lag holds the HW back.
    replica = postgres_horizon({**primary, "replica": True, "replica_lag_us": 7_500_000}, user="reader", max_lag_seconds=3600)
    assert (replica.mode, replica.oldest_open, replica.replica_lag_seconds) == (REPLICA, None, 7.5)
    assert horizon_cap(replica).cap == at(92.5)
    caught_up = postgres_horizon({**primary, "replica": True, "replica_lag_us": 0}, user="reader", max_lag_seconds=3600)
    assert horizon_cap(caught_up).cap == at(100)


def test_mysql_horizon_row() -> None:
    from incsync.sources.jdbc.horizon import INNODB_TRX_CACHE, mysql_horizon

    now_us = int(at(100).timestamp() * 1e6)
    got = mysql_horizon({"now_us": now_us, "oldest_age_us": 30_000_000}, max_lag_seconds=3600)
    assert (got.mode, got.oldest_open) == (TRANSACTIONS, at(70))
    assert got.extraction_start == at(100)
    assert horizon_cap(got).cap == at(70)
    young = mysql_horizon({"now_us": now_us, "oldest_age_us": 50_000}, max_lag_seconds=3600)
    assert horizon_cap(young).cap == at(100) - INNODB_TRX_CACHE  # innodb_trx is a cache up to 100 ms old
    both = mysql_horizon({"now_us": now_us, "oldest_age_us": 90_000_000, "held_age_us": 20_000_000}, max_lag_seconds=60)
    assert (both.oldest_open, both.oldest_within_lag, horizon_cap(both).cap) == (at(10), at(80), at(80))
    idle = mysql_horizon({"now_us": now_us, "oldest_age_us": None}, max_lag_seconds=3600)
    assert idle.oldest_open is None and horizon_cap(idle).cap == at(99.9)


def test_a_mysql_row_committed_just_before_the_extraction_is_not_future_dated(tmp_path: Path) -> None:
    """InnoDB lists transactions from a cache up to 100 ms old, so the HW stays 100 ms behind the clock;
    the rows of those 100 ms are still dated in the past, not ahead of the extraction."""
    from incsync.core.horizon import FUTURE_DATED_ROWS, HELD_BACK_SECONDS, horizon_record
    from incsync.sources.jdbc.horizon import mysql_horizon

    got = mysql_horizon({"now_us": int(at(100).timestamp() * 1e6), "oldest_age_us": None}, max_lag_seconds=3600)
    cap = horizon_cap(got)
    table = pa.table({"id": [1, 2], "updated_at": pa.array([at(99.95), at(100.5)], type=pa.timestamp("us", tz="UTC"))})
    facts = horizon_record(got, cap, previous=None, batch=stage(table, tmp_path / "batch"), column="updated_at", batch_max=at(100.5))
    assert (facts[FUTURE_DATED_ROWS], facts[HELD_BACK_SECONDS]) == ("1", "0.600000")
    assert (got.extraction_start, cap.cap) == (at(100), at(99.9))
    assert new_high_watermark(None, at(100.5), cap.cap) == at(99.9)

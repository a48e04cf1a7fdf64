"""Bounds, watermarks and counts: docs/design.md#bounds and docs/design.md#counts, table-driven."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from incsync.core.bounds import (
    UTC,
    compute_bounds,
    delta_threshold,
    epoch_seconds_floor,
    from_micros,
    new_high_watermark,
    to_micros,
)
from incsync_tests.support.lake import ts

GRID = ts(1)


def bounds(window_day: int, *, start=GRID, hw=None, lookback=300, scheduled=False, grid=GRID):
    return compute_bounds(
        window_start=ts(window_day),
        window_end=ts(window_day + 1),
        grid_start=grid,
        recipient_start=start,
        high_watermark=hw,
        lookback_seconds=lookback,
        scheduled=scheduled,
    )


CASES = [
    # id, kwargs, expected lower, expected reason
    ("first-window", dict(window_day=1), ts(1), "first_window"),
    ("first-window-scheduled-repeat-reads-from-hw", dict(window_day=1, hw=ts(1, 5), scheduled=True), ts(1, 4, 55), "repeat_of_open_window"),
    ("first-window-repeat-never-below-start", dict(window_day=1, hw=ts(1, 0, 2), scheduled=True), ts(1), "repeat_of_open_window"),
    ("first-window-backfill-from-start", dict(window_day=1, hw=ts(1, 5)), ts(1), "first_window"),
    ("start-before-first-boundary", dict(window_day=1, start=ts(1) - timedelta(hours=3)), ts(1) - timedelta(hours=3), "first_window"),
    ("recipient-start-inside-window", dict(window_day=3, start=ts(3, 12)), ts(3, 12), "first_window"),
    ("backfill-whole-window", dict(window_day=3), ts(3) - timedelta(seconds=300), "whole_window"),
    ("backfill-ignores-hw", dict(window_day=3, hw=ts(3, 12)), ts(3) - timedelta(seconds=300), "whole_window"),
    ("repeat-of-open-window", dict(window_day=3, hw=ts(3, 12, 0, 0), scheduled=True), ts(3, 11, 55), "repeat_of_open_window"),
    ("sub-second-hw-floors", dict(window_day=3, hw=ts(3, 12, 0, 0, 999_999), scheduled=True), ts(3, 11, 55), "repeat_of_open_window"),
    ("repeat-hw-just-after-window-start", dict(window_day=3, hw=ts(3, 0, 0, 0, 500), scheduled=True), ts(3) - timedelta(seconds=300), "repeat_of_open_window"),
    ("scheduled-hw-in-other-window", dict(window_day=3, hw=ts(4, 1), scheduled=True), ts(3) - timedelta(seconds=300), "whole_window"),
    ("scheduled-hw-at-window-end-is-next-window", dict(window_day=3, hw=ts(4), scheduled=True), ts(3) - timedelta(seconds=300), "whole_window"),
    ("scheduled-after-the-hw-reads-since-the-hw", dict(window_day=3, hw=ts(1, 22, 10), scheduled=True), ts(1, 22, 5), "since_high_watermark"),
    ("scheduled-after-the-hw-never-below-start", dict(window_day=3, hw=ts(1, 0, 1), scheduled=True, start=ts(1)), ts(1), "since_high_watermark"),
    ("postgres-lookback", dict(window_day=3, hw=ts(3, 12), scheduled=True, lookback=30), ts(3, 11, 59, 30), "repeat_of_open_window"),
    ("mysql-lookback", dict(window_day=3, lookback=5), ts(3) - timedelta(seconds=5), "whole_window"),
    ("lookback-clamped-at-recipient-start", dict(window_day=2, start=ts(1, 23, 59)), ts(1, 23, 59), "whole_window"),
    ("window-before-recipient-start-is-empty", dict(window_day=2, start=ts(5)), ts(3), "whole_window"),
]


@pytest.mark.parametrize(("kwargs", "lower", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bounds(kwargs: dict, lower: datetime, reason: str) -> None:
    day = kwargs["window_day"]
    result = bounds(**kwargs)
    assert (result.lower, result.upper, result.reason) == (lower, ts(day + 1), reason)


def test_empty_range_when_recipient_starts_after_window() -> None:
    assert bounds(2, start=ts(5)).is_empty


def test_watermark_never_moves_back_and_keeps_microseconds() -> None:
    assert new_high_watermark(None, None) is None
    assert new_high_watermark(None, ts(2, 0, 0, 0, 7)) == ts(2, 0, 0, 0, 7)
    assert new_high_watermark(ts(3), ts(2)) == ts(3)
    assert new_high_watermark(ts(3), None) == ts(3)


def test_delta_threshold_rounds_down_to_seconds() -> None:
    assert delta_threshold(None) is None
    assert delta_threshold(ts(2, 10, 0, 5, 999_999)) == ts(2, 10, 0, 5)
    assert epoch_seconds_floor(datetime(1970, 1, 1, 0, 0, 1, 999_999, tzinfo=UTC)) == 1


@given(st.integers(min_value=-(2**52), max_value=253_402_300_799_999_999))
def test_micros_round_trip(micros: int) -> None:
    assert to_micros(from_micros(micros)) == micros


@given(
    start=st.integers(0, 10 * 86_400),
    window=st.integers(1, 20),
    hw=st.one_of(st.none(), st.integers(0, 30 * 86_400 * 1_000_000)),
    lookback=st.integers(0, 3600),
    scheduled=st.booleans(),
)
def test_bounds_properties(start: int, window: int, hw: int | None, lookback: int, scheduled: bool) -> None:
    """Whatever the case, L <= U = window end, L >= recipient start, and L <= window start when in scope."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    s, e = epoch + timedelta(days=window), epoch + timedelta(days=window + 1)
    start_r = epoch + timedelta(seconds=start)
    b = compute_bounds(
        window_start=s, window_end=e, grid_start=epoch + timedelta(days=1), recipient_start=start_r,
        high_watermark=None if hw is None else from_micros(hw), lookback_seconds=lookback, scheduled=scheduled,
    )
    assert b.upper == e
    assert b.lower <= b.upper
    assert b.lower >= min(start_r, e)
    if b.reason == "whole_window":
        assert b.lower == max(s - timedelta(seconds=lookback), start_r) or b.lower == e
    if b.reason == "repeat_of_open_window":
        assert s - timedelta(seconds=lookback) <= b.lower <= from_micros(hw)

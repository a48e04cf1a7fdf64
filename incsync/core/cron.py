"""Cron expressions as Dagster's schedules read them, without importing Dagster.

``incsync validate`` and every config load check a model's ``frequency``; importing Dagster for that
costs more than the rest of the check at 10,000 recipients. croniter is the library Dagster's own
schedules use (vendored); the extra validity rules and the tick arithmetic below are pinned against
Dagster's in ``incsync_tests/operations/test_dagster_compat.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from itertools import pairwise

from croniter import croniter


def is_valid_cron(expression: str) -> bool:
    """Five fields (no seconds), and not a day that never comes (30 or 31 February)."""
    if not expression.strip() or not croniter.is_valid(expression):
        return False
    fields = croniter.expand(expression)[0]
    if len(fields) != 5:
        return False
    days, months = fields[2], fields[3]
    return not (months == [2] and len(days) == 1 and days[0] in (30, 31))


def previous_tick(expression: str, tick: datetime) -> datetime:
    """The latest tick of ``expression`` strictly before ``tick`` (an aware datetime), in its zone.

    Ticks fall on whole minutes, so "before ``tick``" is "before the minute after ``tick - 1 s``
    starts", the form croniter's ``get_prev`` takes (it returns ticks strictly before its start).
    """
    start = (tick - timedelta(seconds=1)).replace(second=0, microsecond=0) + timedelta(minutes=1)
    return croniter(expression, start).get_prev(datetime).replace(fold=0)


@lru_cache(maxsize=256)
def longest_gap(expression: str) -> timedelta:
    """The longest time between two consecutive ticks of ``expression`` (in UTC, the zone the schedules run in).

    A tick falls on every minute of the day its minute and hour fields name, on every day its day fields
    name, so the longest gap is the longer of: the longest gap between two of a day's ticks, and from a
    matching day's last tick to the next matching day's first. The days are walked over two years from
    2024-01-01 (a leap year, so ``29 2`` counts), and on until a second matching day when the cron names
    rarer days; "0 9 * * 1-5" gives 3 days (Friday 09:00 to Monday 09:00), not its 24-hour weekday gap.
    """
    fields = croniter.expand(expression)[0]
    minutes = list(range(60)) if fields[0] == ["*"] else [int(m) for m in fields[0]]
    hours = list(range(24)) if fields[1] == ["*"] else [int(h) for h in fields[1]]
    day = sorted(h * 60 + m for h in hours for m in minutes)  # minutes of the day
    within = max((b - a for a, b in pairwise(day)), default=0)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    horizon = start + timedelta(days=731)
    days = croniter(f"0 0 {' '.join(expression.split()[2:5])}", start - timedelta(seconds=1))
    previous = days.get_next(datetime)
    across = timedelta(0)
    while True:
        following = days.get_next(datetime)
        gap = following - previous - timedelta(minutes=day[-1] - day[0])
        across = max(across, gap)
        if following > horizon:
            break
        previous = following
    return max(timedelta(minutes=within), across)

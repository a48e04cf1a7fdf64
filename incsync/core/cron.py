"""Cron expressions as Dagster's schedules read them, without importing Dagster.

``incsync validate`` and every config load check a model's ``frequency``; importing Dagster for that
costs more than the rest of the check at 10,000 recipients. croniter is the library Dagster's own
schedules use (vendored); the extra validity rules and the tick arithmetic below are pinned against
Dagster's in ``incsync_tests/operations/test_dagster_compat.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

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

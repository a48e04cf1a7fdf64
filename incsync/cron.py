"""Cron expressions as Dagster's schedules accept them, checked without importing Dagster.

``incsync validate`` and every config load check a model's ``frequency``; importing Dagster for that
costs more than the rest of the check at 10,000 recipients. croniter is the library Dagster vendors;
the extra rules are Dagster's own (``dagster._utils.schedules.is_valid_cron_string``), pinned against
it in ``incsync_tests/test_dagster_compat.py``.
"""

from __future__ import annotations

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

"""Each model asset's Dagster freshness policy, from its schedules, so the UI marks a model whose
schedules stopped (docs/config.md#freshness).

Dagster's policy is per asset: any partition's materialization makes the whole asset fresh. The window
is therefore the slowest schedule's: the model's own ``frequency`` and each tier's cron for it, the longest
gap between two ticks of any of them. As long as one of them runs, a transfer lands at least that often;
the policy cannot see a fast schedule stopped beside a slower one still running, nor one recipient left
behind: incsync's own reports keep the per-recipient lag (``incsync status``, the alerts).
"""

from __future__ import annotations

from datetime import timedelta

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig
from incsync.config.products import model_schedules
from incsync.core.cron import longest_gap

# Warn when the tick after the last landed transfer is half an interval late; fail once two whole
# intervals passed without one (the next tick's run did not land within an interval of its tick).
WARN_INTERVALS = 1.5
FAIL_INTERVALS = 2.0


def slowest_schedule(config: IncsyncConfig, model: ModelConfig) -> tuple[str, timedelta]:
    """(cron, longest gap between its ticks) of the model's slowest schedule (the first of equals)."""
    gaps = [(cron, longest_gap(cron)) for _, cron in model_schedules(config, model)]
    return max(gaps, key=lambda g: g[1])


def freshness_policy(config: IncsyncConfig, model: ModelConfig) -> dg.FreshnessPolicy:
    _, gap = slowest_schedule(config, model)
    return dg.FreshnessPolicy.time_window(fail_window=gap * FAIL_INTERVALS, warn_window=gap * WARN_INTERVALS)


def freshness_description(config: IncsyncConfig, model: ModelConfig) -> str:
    """One sentence for the asset's description: the windows and the schedule they come from."""
    cron, gap = slowest_schedule(config, model)
    return (f"Freshness: warns {_span(gap * WARN_INTERVALS)} and fails {_span(gap * FAIL_INTERVALS)} after the last "
            f"transfer landed (its slowest schedule `{cron}` ticks at least every {_span(gap)}).")


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size and seconds * 2 % size == 0:  # whole or half units: "1.5 d", "22.5 min"
            return f"{seconds / size:g} {unit}"
    return f"{seconds} s"

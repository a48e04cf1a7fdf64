"""Per-model schedules: at the model's ``frequency``, runs over every enabled recipient that receives
the model (a run per ``recipients_per_run`` of them, see ``launch``) for the open window plus the window
that closed since the previous tick. A schedule tier with a cron for the model has its own schedule of
the model, over the tier's recipients; the model's own schedule leaves them out."""

from __future__ import annotations

from datetime import datetime

import dagster as dg

from incsync.config.model import ModelConfig
from incsync.config.products import schedule_tier, subscribers
from incsync.config.tags import INCREMENTAL
from incsync.core import cron
from incsync.core.bounds import UTC
from incsync.core.windows import tick_span, window_key_for
from incsync.operations.launch import run_specs
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.assets import model_job
from incsync.orchestration.resources import cached_config


def schedule_name(model: ModelConfig, tier: str | None = None) -> str:
    """``incsync_<model>_schedule``; a tier's: ``incsync_<model>_schedule_<tier>`` (listed beside it)."""
    return f"incsync_{model.model_name}_schedule" + (f"_{tier}" if tier else "")


def previous_tick(model: ModelConfig, tick: datetime, frequency: str | None = None) -> datetime:
    """The tick of ``frequency`` (default: the model's) before ``tick``, in UTC (the zone the schedules run in)."""
    return cron.previous_tick(frequency or model.frequency, tick.astimezone(UTC)).astimezone(UTC)


def build_model_schedule(
    config_path: str,
    model: ModelConfig,
    *,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
    job: dg.UnresolvedAssetJobDefinition | None = None,
    tier: str | None = None,
    frequency: str | None = None,
) -> dg.ScheduleDefinition:
    """``job``: the model's job the Definitions hold (one object per name), else a new one. ``tier``: the
    schedule of that tier's recipients, on ``frequency`` (the tier's cron for the model); None: the
    model's own, over the recipients no tier schedules for this model."""
    frequency = frequency or model.frequency
    who = f"the enabled recipients of tier {tier}" if tier else "the enabled recipients outside a tier"

    @dg.schedule(
        name=schedule_name(model, tier),
        cron_schedule=frequency,
        execution_timezone="UTC",
        target=job if job is not None else model_job(model),  # runs named after the model
        default_status=default_status,
        description=f"Incremental transfers of {model.model_name} for {who} that receive it.",
    )
    def model_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        config = cached_config(config_path)
        tick = context.scheduled_execution_time.astimezone(UTC)
        span = tick_span(model, previous_tick=previous_tick(model, tick, frequency), tick=tick)
        if span is None:
            return dg.SkipReason(f"model {model.model_name} starts after {tick.isoformat()}")
        # Only recipients the sensor registered: a run on an unknown partition would fail.
        registered = context.instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
        known = set(registered)
        name = model.model_name
        recipients = [r for r in subscribers(config, name) if r.id in known and schedule_tier(config, r, name) == tier]
        if not recipients:
            scope = f" of tier {tier}" if tier else (" outside a tier" if config.tiers else "")
            receiving = f" receiving {name}" if config.products else ""
            return dg.SkipReason(f"no enabled recipient{scope}{receiving} is registered yet")
        windows = (window_key_for(model, span[0]), window_key_for(model, span[1]))
        specs = run_specs(
            config, model, recipients, windows={r.id: windows for r in recipients}, registered=registered,
            mode=INCREMENTAL, run_key_prefix=f"tick:{tick.isoformat()}" + (f":{tier}" if tier else ""),
        )
        return [spec.run_request() for spec in specs]

    return model_schedule

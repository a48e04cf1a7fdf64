"""Per-model schedules: at the model's ``frequency``, runs over every enabled recipient (a run per
``recipients_per_run`` of them, see ``launch``) for the open window plus the window that closed since
the previous tick."""

from __future__ import annotations

from datetime import datetime

import dagster as dg

from incsync.core import cron
from incsync.orchestration.assets import model_job
from incsync.config.tags import INCREMENTAL
from incsync.core.windows import tick_span
from incsync.core.bounds import UTC
from incsync.config.model import ModelConfig
from incsync.orchestration.launch import run_specs
from incsync.core.windows import window_key_for
from incsync.orchestration.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.resources import cached_config


def schedule_name(model: ModelConfig) -> str:
    return f"incsync_{model.model_name}_schedule"


def previous_tick(model: ModelConfig, tick: datetime) -> datetime:
    """The cron tick before ``tick`` (UTC, the zone the schedules run in)."""
    return cron.previous_tick(model.frequency, tick.astimezone(UTC)).astimezone(UTC)


def build_model_schedule(
    config_path: str,
    model: ModelConfig,
    *,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
    job: dg.UnresolvedAssetJobDefinition | None = None,
) -> dg.ScheduleDefinition:
    """``job``: the model's job the Definitions hold (one object per name), else a new one."""
    @dg.schedule(
        name=schedule_name(model),
        cron_schedule=model.frequency,
        execution_timezone="UTC",
        target=job if job is not None else model_job(model),  # runs named after the model
        default_status=default_status,
        description=f"Incremental transfers of {model.model_name} for every enabled recipient.",
    )
    def model_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        config = cached_config(config_path)
        tick = context.scheduled_execution_time.astimezone(UTC)
        span = tick_span(model, previous_tick=previous_tick(model, tick), tick=tick)
        if span is None:
            return dg.SkipReason(f"model {model.model_name} starts after {tick.isoformat()}")
        # Only recipients the sensor registered: a run on an unknown partition would fail.
        registered = context.instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
        known = set(registered)
        recipients = [r for r in config.recipients if r.enabled and r.id in known]
        if not recipients:
            return dg.SkipReason("no enabled recipient is registered yet")
        windows = (window_key_for(model, span[0]), window_key_for(model, span[1]))
        specs = run_specs(
            config, model, recipients, windows={r.id: windows for r in recipients}, registered=registered,
            mode=INCREMENTAL, run_key_prefix=f"tick:{tick.isoformat()}",
        )
        return [spec.run_request() for spec in specs]

    return model_schedule

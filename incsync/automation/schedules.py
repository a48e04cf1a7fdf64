"""Per-model schedules: at the model's ``frequency``, one run per enabled recipient for the open
window plus the window that closed since the previous tick."""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
from dagster._utils.schedules import get_latest_completed_cron_tick

from incsync.assets import model_asset_key
from incsync.automation.tags import INCREMENTAL, transfer_run_tags
from incsync.automation.windows import range_tags, tick_span
from incsync.changes import UTC
from incsync.config import ModelConfig
from incsync.partitions import RECIPIENTS_PARTITIONS
from incsync.resources import cached_config


def schedule_name(model: ModelConfig) -> str:
    return f"incsync_{model.model_name}_schedule"


def previous_tick(model: ModelConfig, tick: datetime) -> datetime:
    """The cron tick before ``tick``."""
    return get_latest_completed_cron_tick(model.frequency, tick - timedelta(seconds=1), "UTC").astimezone(UTC)


def build_model_schedule(
    config_path: str,
    model: ModelConfig,
    *,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=schedule_name(model),
        cron_schedule=model.frequency,
        execution_timezone="UTC",
        target=[model_asset_key(model)],
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
        registered = set(context.instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS))
        recipients = [r for r in config.recipients if r.enabled and r.id in registered]
        if not recipients:
            return dg.SkipReason("no enabled recipient is registered yet")
        return [
            dg.RunRequest(
                run_key=f"{model.model_name}:{r.id}:{tick.isoformat()}",
                asset_selection=[model_asset_key(model)],
                tags={**transfer_run_tags(config, model, r, mode=INCREMENTAL), **range_tags(model, r, *span)},
            )
            for r in recipients
        ]

    return model_schedule

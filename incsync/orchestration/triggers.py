"""Everything automation adds to the Definitions: the recipient sensor, the schedules (one per model and
per tier with a cron for it), the reaper sensor (``operations.liveness.reap`` every 30 s) and, with an
`alerts:` section, the failure-alert sensor."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from incsync.config.model import IncsyncConfig
from incsync.config.products import model_schedules
from incsync.errors import ConfigError
from incsync.operations.liveness import reap
from incsync.orchestration.assets import model_job
from incsync.orchestration.schedules import build_model_schedule
from incsync.orchestration.sensors import build_recipient_sensor
from incsync.staging.folders import default_staging_dir

# "running" (default): the sensor and schedules start with the daemon; "stopped": turn them on in the UI.
AUTOMATION_ENV_VAR = "INCSYNC_AUTOMATION"
REAPER_SENSOR = "incsync_reaper"


def automation_running() -> bool:
    value = os.environ.get(AUTOMATION_ENV_VAR, "running").lower()
    if value not in ("running", "stopped"):
        raise ConfigError("environment", [f'{AUTOMATION_ENV_VAR}: "{value}" must be "running" or "stopped"'])
    return value == "running"


def automation(
    config_path: str, config: IncsyncConfig, jobs: dict[str, dg.UnresolvedAssetJobDefinition] | None = None
) -> tuple[list[dg.SensorDefinition], list[dg.ScheduleDefinition]]:
    """``jobs``: the models' jobs by model name (``assets.model_job``), shared by the sensor and the
    schedules so Dagster sees one job per name."""
    running = automation_running()
    sensor_status = dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED
    schedule_status = dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
    if not config.models:
        return [], []
    jobs = jobs if jobs is not None else {m.model_name: model_job(m) for m in config.models}
    sensors = [
        build_recipient_sensor(
            config_path, config.models, default_status=sensor_status, jobs=[jobs[m.model_name] for m in config.models]
        ),
        build_reaper_sensor(default_staging_dir(config), default_status=sensor_status),
    ]
    if config.alerts is not None:
        from incsync.orchestration.alerts import build_alert_sensor

        sensors.append(build_alert_sensor(config_path, default_status=sensor_status))
    schedules = [
        build_model_schedule(config_path, m, default_status=schedule_status, job=jobs[m.model_name], tier=tier, frequency=cron)
        for m in config.models for tier, cron in model_schedules(config, m)
    ]
    return sensors, schedules


def build_reaper_sensor(
    staging_root: str, *, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=REAPER_SENSOR,
        minimum_interval_seconds=30,
        default_status=default_status,
        description="Marks transfers whose process died ORPHANED and removes their staging "
        "(CLI and worker runs have no Dagster run monitoring).",
    )
    def reaper(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        marked = reap(context.instance, staging_root=Path(staging_root))
        return dg.SkipReason(f"marked {len(marked)} run(s) ORPHANED: {', '.join(marked)}" if marked else "no dead transfer")

    return reaper

"""Builds the Dagster Definitions of a configuration file (assets, resources, automation)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import dagster as dg

from incsync.config.load import load_config
from incsync.config.model import IncsyncConfig
from incsync.orchestration.assets import IO_MANAGER_KEY, build_model_asset, model_job, source_specs
from incsync.orchestration.io_manager import transfer_io_manager
from incsync.orchestration.resources import (
    DestinationKindResource,
    IncsyncConfigResource,
    SourceResource,
    destination_resource_key,
    source_resource_key,
    spark_resource,
)
from incsync.orchestration.triggers import automation
from incsync.paths import config_path
from incsync.sources.jdbc.connect import driver_jars, driver_packages
from incsync.staging.folders import default_staging_dir

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "lake-to-delta" / "incsync.yaml"


def config_for_code_location(*, cwd: Path | None = None, example: Path = EXAMPLE_CONFIG) -> str | None:
    """The file a code location loads: None (``$INCSYNC_CONFIG`` or ./incsync.yaml) when either is there,
    else the shipped example, else a ConfigError saying exactly what to set."""
    from incsync.errors import ConfigError
    from incsync.paths import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE

    if os.environ.get(CONFIG_ENV_VAR) or ((cwd or Path.cwd()) / DEFAULT_CONFIG_FILE).exists():
        return None
    if example.exists():
        logging.getLogger(__name__).warning(
            "incsync: %s is not set and there is no %s here, so the example %s is loaded; "
            "export %s=/path/to/incsync.yaml to load yours", CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, example, CONFIG_ENV_VAR,
        )
        return str(example)
    raise ConfigError(DEFAULT_CONFIG_FILE, [
        f"file not found; export {CONFIG_ENV_VAR}=/path/to/incsync.yaml before `dagster dev` "
        f"(or write one here with `incsync init`)"
    ])


def build_definitions(path: str | os.PathLike[str] | None = None, *, config: IncsyncConfig | None = None) -> dg.Definitions:
    """The definitions of the file at ``path``; ``config``: that file, already loaded. Building them
    changes nothing in the process (its environment, SQLAlchemy's listeners): a run's process tunes what
    it needs when the run starts, an instance's storage from the instance's dagster.yaml."""
    file = str(config_path(path).resolve())
    config = config or load_config(file)
    resources: dict[str, object] = {
        "spark": spark_resource(
            config.spark, extra_jars=driver_jars(config.sources), packages=driver_packages(config.sources)
        ),
        "incsync": IncsyncConfigResource(config_path=file),
        IO_MANAGER_KEY: transfer_io_manager(
            staging_dir=default_staging_dir(config), staging_storage_options=dict(config.staging_storage_options),
            kinds={d.kind for d in config.destinations},
        ),
    }
    for source in config.sources:
        resources[source_resource_key(source.name)] = SourceResource(config_path=file, source_name=source.name)
    for kind in sorted({d.kind for d in config.destinations}):
        resources[destination_resource_key(kind)] = DestinationKindResource(config_path=file, kind=kind)
    # One job per model, named after it: the CLI, the sensor, the schedules and backfills launched from
    # the job's page all run it (runs listed as ``orders``, not ``__ASSET_JOB``).
    jobs = {m.model_name: model_job(m) for m in config.models}
    sensors, schedules = automation(file, config, jobs)
    from incsync.orchestration.checks import build_check_schedule, build_integrity_check
    from incsync.orchestration.triggers import automation_running

    status = dg.DefaultScheduleStatus.RUNNING if automation_running() else dg.DefaultScheduleStatus.STOPPED
    schedules = [*schedules, *(build_check_schedule(m, default_status=status) for m in config.models
                               if m.integrity_check == "schedule")]
    from incsync.orchestration.housekeeping import build_maintenance_schedule, maintenance_job

    schedules.append(build_maintenance_schedule(config, default_status=status))
    jobs_beside: list[object] = [maintenance_job]
    assets: list[object] = [*source_specs(config), *(build_model_asset(config, m) for m in config.models)]
    if config.audit is not None:  # without `audit:` nothing of it exists
        from incsync.orchestration.housekeeping import audit_asset, audit_job, build_audit_schedule

        assets.append(audit_asset)
        jobs_beside.append(audit_job)
        schedules.append(build_audit_schedule(config, default_status=status))
    return dg.Definitions(
        assets=assets,
        asset_checks=[build_integrity_check(m) for m in config.models],
        resources=resources,
        sensors=sensors,
        schedules=schedules,
        jobs=[*jobs.values(), *jobs_beside],
        # One process per run: its Spark session serves every model and partition of the run.
        executor=dg.in_process_executor,
    )


def check_loadable(path: str | os.PathLike[str], *, config: IncsyncConfig) -> None:
    """Build the definitions of the file at ``path`` (loaded as ``config``) and load them as `dagster dev`, the
    daemon and `dagster definitions validate` do; where Dagster would refuse them, a ConfigError saying why.
    Starts no JVM and opens no connection."""
    import warnings

    from incsync.errors import ConfigError, IncsyncError
    from incsync.operations.dagster_compat import load_as_code_location

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Dagster's BetaWarnings: the code location logs them, a check need not
            load_as_code_location(build_definitions(path, config=config))
    except IncsyncError:
        raise
    except Exception as exc:
        said = " ".join(str(exc).split()).replace("; ", ", ").rstrip(".")
        raise ConfigError(str(path), [
            f"Dagster cannot load this file's definitions ({type(exc).__name__}: {said}), so `dagster dev`, the "
            "daemon and every schedule and sensor would stop; change what it names (a model's job is named after "
            "the model, its asset's op <source>__<model>; incsync's own jobs are incsync_maintenance and "
            "incsync_audit), or report an incsync bug if it names nothing of the file"
        ]) from exc

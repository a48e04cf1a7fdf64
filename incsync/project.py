"""Builds the Dagster Definitions of a configuration file (assets, resources, automation)."""

from __future__ import annotations

import os

import dagster as dg

from incsync.assets import IO_MANAGER_KEY, build_model_asset, source_specs
from incsync.automation.registry import automation
from incsync.config import config_path, load_config
from incsync.dagster_compat import tune_sqlite_storage
from incsync.io_manager import TransferIOManager
from incsync.resources import (
    DestinationKindResource,
    IncsyncConfigResource,
    SourceResource,
    default_staging_dir,
    destination_resource_key,
    source_resource_key,
    spark_resource,
)
from incsync.sources.jdbc import driver_jars, driver_packages


def build_definitions(path: str | os.PathLike[str] | None = None) -> dg.Definitions:
    tune_sqlite_storage()  # every process that runs transfers loads these definitions
    file = str(config_path(path).resolve())
    config = load_config(file)
    resources: dict[str, object] = {
        "spark": spark_resource(
            config.spark, extra_jars=driver_jars(config.sources), packages=driver_packages(config.sources)
        ),
        "incsync": IncsyncConfigResource(config_path=file),
        IO_MANAGER_KEY: TransferIOManager(staging_dir=default_staging_dir(config)),
    }
    for source in config.sources:
        resources[source_resource_key(source.name)] = SourceResource(config_path=file, source_name=source.name)
    for kind in sorted({d.kind for d in config.destinations}):
        resources[destination_resource_key(kind)] = DestinationKindResource(config_path=file, kind=kind)
    sensors, schedules = automation(file, config)
    return dg.Definitions(
        assets=[*source_specs(config), *(build_model_asset(config, m) for m in config.models)],
        resources=resources,
        sensors=sensors,
        schedules=schedules,
        # One process per run: its Spark session serves every model and partition of the run.
        executor=dg.in_process_executor,
    )


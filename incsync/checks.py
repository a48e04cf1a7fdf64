"""Connectivity checks for `incsync validate --connect`: every source and destination is reached."""

from __future__ import annotations

from pathlib import Path

from incsync.config import (
    DeltaDestinationConfig,
    IncsyncConfig,
    JdbcSourceConfig,
    LakeSourceConfig,
    ObjectStorageDestinationConfig,
    PostgresDestinationConfig,
)
from incsync.errors import ConfigError, IncsyncError


def check_connectivity(config: IncsyncConfig) -> list[str]:
    """One line per source or destination that cannot be reached, naming it and the fix."""
    problems: list[str] = []
    for source in config.sources:
        if isinstance(source, LakeSourceConfig) and source.format != "table" and not Path(source.path or "").is_dir():
            problems.append(f"sources[{source.name}].path: folder {source.path} does not exist; create it or fix the path")
    for destination in config.destinations:
        if isinstance(destination, PostgresDestinationConfig):
            from incsync.destinations.postgres import PostgresDestination

            try:
                PostgresDestination(destination).check()
            except ConfigError as exc:
                problems.extend(exc.problems)
            except IncsyncError as exc:
                problems.append(" ".join(str(exc).split()))
        if isinstance(destination, DeltaDestinationConfig | ObjectStorageDestinationConfig) and "://" not in destination.path:
            parent = Path(destination.path).parent
            if not parent.exists():
                problems.append(
                    f"destinations[{destination.name}].path: parent folder {parent} does not exist; create it"
                )
    jdbc = {s.name for s in config.sources if isinstance(s, JdbcSourceConfig)}
    if jdbc:
        problems.extend(check_jdbc_sources(config, jdbc))
    return problems


def _jdbc_spark(config: IncsyncConfig):  # noqa: ANN202 - SparkSession, imported lazily
    from pyspark.sql import SparkSession

    from incsync.resources import spark_config
    from incsync.sources.jdbc import driver_jars, driver_packages

    builder = SparkSession.builder
    conf = spark_config(config.spark, extra_jars=driver_jars(config.sources), packages=driver_packages(config.sources))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def check_jdbc_sources(config: IncsyncConfig, names: set[str]) -> list[str]:
    """Connect to each database source through Spark JDBC (the path transfers take, drivers included)
    and find every model's table and columns."""
    from incsync.sources import check_sources

    return check_sources(config, _jdbc_spark(config), sources=names)


def check_drift(config: IncsyncConfig) -> list[str]:
    """One line per (model, recipient) of a database source whose columns drifted from its destination's
    (added, dropped, changed), saying what the next transfer does about it."""
    from incsync.drift import drift_report

    jdbc = {s.name for s in config.sources if isinstance(s, JdbcSourceConfig)}
    return drift_report(config, _jdbc_spark(config), sources=jdbc) if jdbc else []

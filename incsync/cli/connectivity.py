"""Connectivity checks for `incsync validate --connect`: every source and destination is reached."""

from __future__ import annotations

from pathlib import Path

from incsync.config.model import IncsyncConfig
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig
from incsync.destinations.registry import build_destination
from incsync.errors import ConfigError, IncsyncError
from incsync.storage.reach import storage_problems


def check_connectivity(config: IncsyncConfig) -> list[str]:
    """One line per source or destination that cannot be reached or lacks a column a model names,
    with the fix. Lake and PostgreSQL sources are checked in parallel without Spark
    (``validate_checks``); other databases through Spark JDBC, the path their transfers take."""
    from incsync.cli.validate_checks import connect_schema_problems
    from incsync.storage.names import is_url, local_path

    problems: list[str] = []
    for source in config.sources:
        if isinstance(source, LakeSourceConfig) and source.format != "table" and is_url(source.path):
            problems.extend(storage_problems(f"sources[{source.name}]", str(source.path), source.storage_options))
        elif isinstance(source, LakeSourceConfig) and source.format != "table" and not Path(
            local_path(source.path or "")
        ).is_dir():
            problems.append(f"sources[{source.name}].path: folder {source.path} does not exist; create it or fix the path")
    if is_url(config.staging_dir):
        problems.extend(storage_problems("staging_dir", str(config.staging_dir), config.staging_storage_options, key=""))
    for destination in config.destinations:
        try:  # each kind's own check: reachable, credentials accepted (a local folder needs none)
            build_destination(destination).check()
        except ConfigError as exc:  # an unset password variable, an unlistable URL
            problems.extend(exc.problems)
        except IncsyncError as exc:
            problems.append(" ".join(str(exc).split()))
    schema_problems, checked = connect_schema_problems(config)
    problems.extend(schema_problems)
    jdbc = {s.name for s in config.sources if isinstance(s, JdbcSourceConfig)} - checked
    if jdbc:
        problems.extend(check_jdbc_sources(config, jdbc))
    return problems


def _jdbc_spark(config: IncsyncConfig):  # noqa: ANN202 - SparkSession, imported lazily
    from pyspark.sql import SparkSession

    from incsync.sources.jdbc.connect import driver_jars, driver_packages
    from incsync.spark.session import spark_config, workers_use_this_python

    workers_use_this_python()
    builder = SparkSession.builder
    conf = spark_config(config.spark, extra_jars=driver_jars(config.sources), packages=driver_packages(config.sources))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def check_jdbc_sources(config: IncsyncConfig, names: set[str]) -> list[str]:
    """Connect to each database source through Spark JDBC (the path transfers take, drivers included)
    and find every model's table and columns."""
    from incsync.sources.registry import check_sources

    return check_sources(config, _jdbc_spark(config), sources=names)


def check_drift(config: IncsyncConfig) -> list[str]:
    """One line per (model, recipient) of a database source whose columns drifted from its destination's
    (added, dropped, changed), saying what the next transfer does about it."""
    from incsync.cli.drift import drift_report

    jdbc = {s.name for s in config.sources if isinstance(s, JdbcSourceConfig)}
    return drift_report(config, _jdbc_spark(config), sources=jdbc) if jdbc else []

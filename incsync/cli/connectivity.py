"""Connectivity checks for `incsync validate --connect`: every source and destination is reached."""

from __future__ import annotations

from pathlib import Path

from incsync.config.model import IncsyncConfig
from incsync.config.destinations import (
    DeltaDestinationConfig,
    ObjectStorageDestinationConfig,
    PostgresDestinationConfig,
)
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig
from incsync.errors import ConfigError, IncsyncError


def check_connectivity(config: IncsyncConfig) -> list[str]:
    """One line per source or destination that cannot be reached or lacks a column a model names,
    with the fix. Lake and PostgreSQL sources are checked in parallel without Spark
    (``validate_checks``); other databases through Spark JDBC, the path their transfers take."""
    from incsync.storage.names import is_url, local_path
    from incsync.cli.validate_checks import connect_schema_problems

    problems: list[str] = []
    for source in config.sources:
        if isinstance(source, LakeSourceConfig) and source.format != "table" and is_url(source.path):
            problems.extend(_storage_problems(f"sources[{source.name}]", str(source.path), source.storage_options))
        elif isinstance(source, LakeSourceConfig) and source.format != "table" and not Path(
            local_path(source.path or "")
        ).is_dir():
            problems.append(f"sources[{source.name}].path: folder {source.path} does not exist; create it or fix the path")
    if is_url(config.staging_dir):
        problems.extend(_storage_problems("staging_dir", str(config.staging_dir), config.staging_storage_options, key=""))
    for destination in config.destinations:
        if isinstance(destination, PostgresDestinationConfig):
            from incsync.destinations.postgres.destination import PostgresDestination

            try:
                PostgresDestination(destination).check()
            except ConfigError as exc:
                problems.extend(exc.problems)
            except IncsyncError as exc:
                problems.append(" ".join(str(exc).split()))
        if destination.kind in ("duckdb", "iceberg", "mariadb", "mysql"):
            from incsync.destinations.registry import build_destination

            try:
                build_destination(destination).check()  # type: ignore[attr-defined]
            except ConfigError as exc:  # an unset password variable
                problems.extend(exc.problems)
            except IncsyncError as exc:
                problems.append(" ".join(str(exc).split()))
        if isinstance(destination, DeltaDestinationConfig | ObjectStorageDestinationConfig) and is_url(destination.path):
            problems.extend(_storage_problems(f"destinations[{destination.name}]", destination.path, destination.storage_options))
        # A local Delta or object-storage destination whose folders do not exist yet is fine: the first
        # transfer creates them.
    schema_problems, checked = connect_schema_problems(config)
    problems.extend(schema_problems)
    jdbc = {s.name for s in config.sources if isinstance(s, JdbcSourceConfig)} - checked
    if jdbc:
        problems.extend(check_jdbc_sources(config, jdbc))
    return problems


def _storage_problems(where: str, url: str, options: dict[str, str], *, key: str = ".path") -> list[str]:
    """The location listed once through the storage layer: reachable, and the credentials accepted."""
    from incsync.storage.filesystems import resolve_options
    from incsync.storage.files import open_store

    import pyarrow.fs as pafs

    option = "staging_storage_options" if not key else f"{where}.storage_options"
    try:
        store = open_store(url, resolve_options(options, f"{where}.storage_options"))
        bucket = store.root.split("/", 1)[0]
        if store.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            return [f"{where}{key}: {url}: bucket {bucket} does not exist (or {option} cannot see it); create it or fix the URL"]
        store.list()
    except ConfigError as exc:
        return exc.problems
    except OSError as exc:
        reason = " ".join(str(exc).split())[:300]
        return [f"{where}{key}: {url} cannot be listed ({reason}); check the URL, {option} and the credentials"]
    return []


def _jdbc_spark(config: IncsyncConfig):  # noqa: ANN202 - SparkSession, imported lazily
    from pyspark.sql import SparkSession

    from incsync.spark.session import spark_config
    from incsync.sources.jdbc.connect import driver_jars, driver_packages

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

"""Dagster resources: a lazy Spark session, one resource per source, one per destination kind,
and the recipient registry. None of them starts a JVM or opens a connection until used."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import dagster as dg
from pydantic import Field
from dagster_pyspark import LazyPySparkResource

from incsync.config import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config_load import load_config
from incsync.destinations import Destination, build_destination
from incsync.errors import ConfigError
from incsync.sources import Source, build_source
from incsync.sources.jdbc_sql import DRIVERS
from incsync.spark_cluster import driver_address

JDBC_DRIVER_JARS = tuple(dict.fromkeys(driver.os_jar for driver in DRIVERS.values()))

SPARK_DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "incsync",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}",
}


def spark_config(
    overrides: dict[str, str] | None = None, *, extra_jars: Sequence[str] = (), packages: Sequence[str] = ()
) -> dict[str, str]:
    """Defaults plus the OS's JDBC driver jars (no Maven download needed), the sources' own driver
    jars and Maven packages, plus the file's settings. ``spark.jars`` also ships the drivers to a
    cluster's executors. The driver stays on 127.0.0.1 unless the master runs executors elsewhere
    (``spark_cluster``)."""
    # Spark's Python workers (staging to an object store runs in them) take PYSPARK_PYTHON, else the
    # PATH's python3, which lacks incsync's packages; a cluster's own setting wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = dict(SPARK_DEFAULTS)
    conf.update(driver_address(overrides or {}))
    jars = [j for j in JDBC_DRIVER_JARS if Path(j).exists()] + [j for j in extra_jars if j not in JDBC_DRIVER_JARS]
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    conf.update(overrides or {})
    if "spark.remote" in conf:  # Spark Connect: the server owns master, jars and driver settings
        conf = {k: v for k, v in conf.items() if k in ("spark.remote", "spark.app.name") or k.startswith("spark.sql.")}
    return conf


class SparkWarmUp:
    """The run's Spark session, started in a thread while the run does its other I/O.

    A run of many recipients reads their destinations' states, takes their transfer slots and asks the
    source for its horizon before the first Spark read; a local JVM takes 10-30 s to start, so starting
    it at the top of the step overlaps the two. ``get()`` waits for the warm-up; if the warm-up failed,
    it tries again in the caller's thread, so the caller sees the real error.
    """

    def __init__(self, resource: LazyPySparkResource):
        self._resource = resource
        self._lock = threading.Lock()

    def start(self) -> SparkWarmUp:
        threading.Thread(target=self._warm, name="incsync-spark-warm-up", daemon=True).start()
        return self

    def _warm(self) -> None:
        try:
            self.get()
        except Exception:  # noqa: BLE001 - get() in the caller's thread raises it again, where it belongs
            logging.getLogger(__name__).debug("Spark warm-up failed; the first read starts it again", exc_info=True)

    def get(self):
        with self._lock:
            return self._resource.spark_session


def spark_resource(
    overrides: dict[str, str] | None = None, *, extra_jars: Sequence[str] = (), packages: Sequence[str] = ()
) -> LazyPySparkResource:
    return LazyPySparkResource(spark_config=spark_config(overrides, extra_jars=extra_jars, packages=packages))


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int, period: int) -> IncsyncConfig:
    del mtime_ns, size, period  # part of the cache key: an edited file (or a due table read) is read again
    return load_config(path)


def cached_config(path: str) -> IncsyncConfig:
    """The file parsed once per process, and again only when its path, mtime or size changes; with
    ``recipients_from``, also every ``refresh_seconds`` (the table's rows may change)."""
    file = Path(path).resolve()
    try:
        stat = file.stat()
    except FileNotFoundError:
        return load_config(file)  # raises the clear "file not found" error
    config = _load(str(file), stat.st_mtime_ns, stat.st_size, 0)
    if config.recipients_from is None:
        return config
    every = config.recipients_from.refresh_seconds
    if every == 0:
        return load_config(file)
    return _load(str(file), stat.st_mtime_ns, stat.st_size, int(time.time() // every) + 1)


class IncsyncConfigResource(dg.ConfigurableResource):
    """The configuration file and the recipient registry it holds."""

    config_path: str = Field(description="Path of the incsync YAML file.")

    @property
    def config(self) -> IncsyncConfig:
        return cached_config(self.config_path)

    def recipients(self, *, enabled_only: bool = False) -> list[RecipientConfig]:
        return [r for r in self.config.recipients if r.enabled or not enabled_only]

    def recipient(self, recipient_id: str) -> RecipientConfig:
        try:
            return self.config.recipient(recipient_id)
        except KeyError as exc:
            raise ConfigError(self.config_path, [f"recipients: {exc.args[0]}; add it to the file or remove the partition"]) from None

    def model(self, name: str) -> ModelConfig:
        return self.config.model(name)


class SourceResource(dg.ConfigurableResource):
    """One configured source."""

    config_path: str
    source_name: str

    def client(self) -> Source:
        return build_source(cached_config(self.config_path).source(self.source_name))


class DestinationKindResource(dg.ConfigurableResource):
    """All destinations of one kind (delta, postgres, object_storage)."""

    config_path: str
    kind: str

    def client(self, name: str) -> Destination:
        config = cached_config(self.config_path).destination(name)
        if config.kind != self.kind:
            raise ConfigError(self.config_path, [f'destinations: "{name}" is of kind {config.kind}, not {self.kind}'])
        return build_destination(config)


def source_resource_key(source_name: str) -> str:
    return f"source_{source_name}"


def destination_resource_key(kind: str) -> str:
    return f"{kind}_destination"


def default_staging_dir(config: IncsyncConfig) -> str:
    return config.staging_dir or os.environ.get("INCSYNC_STAGING_DIR") or str(Path(os.environ.get("TMPDIR", "/tmp")) / "incsync-staging")

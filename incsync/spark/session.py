"""The Spark session's settings: defaults, the OS's JDBC driver jars, the file's overrides; and a
session started in the background while a run does its other I/O."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from incsync.core.vendor_sql import DRIVERS
from incsync.spark import class_archive
from incsync.spark.cluster import driver_address

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JDBC_DRIVER_JARS = tuple(dict.fromkeys(driver.os_jar for driver in DRIVERS.values()))

# The driver JVM's collector: the serial one. Under G1 (the JVM's choice on 2+ cores) a long staging task
# grows the heap toward its 1 GB cap as it reads (a 3,000,000-row tenant's JVM peaked at 754-934 MB against
# 536-599 MB for one of 300,000); the serial collector keeps it to what the task holds (667 against 501 MB)
# at the same speed, and C200's fan-out at ~950 MB against ~1,360 MB (benchmarks/README.md). Local
# mode runs its tasks in this JVM; a cluster's executors keep their own settings.
DRIVER_GC = "-XX:+UseSerialGC"

SPARK_DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "incsync",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')} "
                                     f"{DRIVER_GC}",
}


def spark_config(
    overrides: dict[str, str] | None = None, *, extra_jars: Sequence[str] = (), packages: Sequence[str] = ()
) -> dict[str, str]:
    """Defaults plus the OS's JDBC driver jars (no Maven download needed), the sources' own driver
    jars and Maven packages, plus the file's settings. ``spark.jars`` also ships the drivers to a
    cluster's executors. The driver stays on 127.0.0.1 unless the master runs executors elsewhere
    (``spark_cluster``)."""
    conf = dict(SPARK_DEFAULTS)
    conf.update(driver_address(overrides or {}))
    jars = [j for j in JDBC_DRIVER_JARS if Path(j).exists()] + [j for j in extra_jars if j not in JDBC_DRIVER_JARS]
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    conf.update(overrides or {})
    archive = class_archive.java_options()
    if archive:  # a local driver JVM maps the shared classes (``class_archive``); Spark Connect drops it below
        conf["spark.driver.extraJavaOptions"] = f"{conf.get('spark.driver.extraJavaOptions', '')} {archive}".strip()
    if "spark.remote" in conf:  # Spark Connect: the server owns master, jars and driver settings
        conf = {k: v for k, v in conf.items() if k in ("spark.remote", "spark.app.name") or k.startswith("spark.sql.")}
    return conf


def workers_use_this_python() -> None:
    """Spark's Python workers (staging to an object store runs in them) take ``PYSPARK_PYTHON``, which
    pyspark reads from the environment when a session starts, else the PATH's python3, which lacks
    incsync's packages: this interpreter unless the environment names one (a cluster's own setting wins).
    Called where a session starts, never where settings are only built."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


class _SessionSource(Protocol):
    @property
    def spark_session(self) -> Any: ...


class SparkWarmUp:
    """The run's Spark session, started in a thread while the run does its other I/O.

    A run of many recipients reads their destinations' states, takes their transfer slots and asks the
    source for its horizon before the first Spark read; a local JVM takes a long while to start, so starting
    it at the top of the step overlaps the two. ``get()`` waits for the warm-up; if the warm-up failed,
    it tries again in the caller's thread, so the caller sees the real error.
    """

    def __init__(self, resource: _SessionSource) -> None:
        self._resource = resource
        self._lock = threading.Lock()

    def start(self) -> SparkWarmUp:
        class_archive.ensure_building()  # once per install, in the background: later runs' JVMs start faster
        threading.Thread(target=self._warm, name="incsync-spark-warm-up", daemon=True).start()
        return self

    def _warm(self) -> None:
        try:
            self.get()
        except Exception:
            logging.getLogger(__name__).debug("Spark warm-up failed; the first read starts it again", exc_info=True)

    def get(self) -> SparkSession:
        with self._lock:
            return self._resource.spark_session

"""The embedded driver JVM's heap, sized from the file's plan instead of Spark's fixed 1 GB.

A local session's JVM runs the driver and every task; staging streams the JDBC rows into Parquet, so
what a task holds is its fetch buffer and one Parquet row group (up to 128 MB), whatever the read's
size. The heap therefore follows how many reads run at once, not how many rows they move
(benchmarks/README.md "JVM sizing"). Spark itself refuses a heap under 450 MB (300 MB reserved × 1.5).
"""

from __future__ import annotations

import os
import re

DRIVER_MEMORY = "spark.driver.memory"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
HEAP_FLOOR_MB = 512
HEAP_PER_EXTRA_TASK_MB = 256
HEAP_CAP_MB = 2048
_LOCAL_CORES = re.compile(r"local\[(\d+|\*)(?:,\s*\d+)?\]")


def local_cores(master: str) -> int | None:
    """The task slots of a ``local``/``local[N]``/``local[*]`` master; None for any other master."""
    if master == "local":
        return 1
    match = _LOCAL_CORES.fullmatch(master)
    if match is None:
        return None
    return os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))


def planned_heap_mb(*, concurrent_tasks: int) -> int:
    """The floor for one task, a Parquet writer's worth for each further task, capped."""
    return min(HEAP_CAP_MB, HEAP_FLOOR_MB + HEAP_PER_EXTRA_TASK_MB * max(0, concurrent_tasks - 1))


def owns_heap(settings: dict[str, str]) -> bool:
    """True when the settings start a local JVM whose heap nobody else chose: no Spark Connect server
    or cluster (they own their driver), no ``spark.driver.memory`` or ``-Xmx`` of the user's, no
    ``SPARK_DRIVER_MEMORY`` in the environment."""
    if "spark.remote" in settings or local_cores(settings.get("spark.master", "local[*]")) is None:
        return False
    if DRIVER_MEMORY in settings or "-Xmx" in settings.get(DRIVER_JAVA_OPTIONS, ""):
        return False
    return not os.environ.get("SPARK_DRIVER_MEMORY")


def driver_heap(settings: dict[str, str], *, queries: int) -> dict[str, str]:
    """``spark.driver.memory`` for ``settings`` (the file's ``spark:``) when incsync owns the heap: one
    task per query of the widest read, at most one per core."""
    if not owns_heap(settings):
        return {}
    cores = local_cores(settings.get("spark.master", "local[*]")) or 1
    return {DRIVER_MEMORY: f"{planned_heap_mb(concurrent_tasks=min(max(1, queries), cores))}m"}

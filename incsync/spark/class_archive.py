"""A class-data-sharing archive of the local Spark driver's classes: a cold JVM starts markedly faster.

Every Dagster run with local Spark starts its own JVM, and on a small machine that start is the largest
part of a scheduled run of many recipients (benchmarks/HISTORY.md has the runs). Java's
application class-data sharing (JDK 13+: ``-XX:ArchiveClassesAtExit`` writes, ``-XX:SharedArchiveFile``
maps) keeps the parsed and verified classes Spark loads at startup in one file that every driver JVM
maps instead of loading them again; JVMs that run at once share its pages.

The archive is made once per machine and (Java, pyspark) install, in the background, by the first
process that starts a local session without one (``ensure_building``): a separate Python process starts
Spark with ``-XX:ArchiveClassesAtExit``, runs a small read/write workload, stops the JVM, and renames the
finished file into place. Sessions started while it is being made start as before. A JVM that cannot use
the archive (another Java build, another classpath) runs as before, without a warning in the run's log.

``INCSYNC_SPARK_CLASS_ARCHIVE=off`` turns it off; ``INCSYNC_CACHE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/incsync``, else ``~/.cache/incsync``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

SWITCH_ENV = "INCSYNC_SPARK_CLASS_ARCHIVE"
CACHE_ENV = "INCSYNC_CACHE_DIR"
# A builder that has not finished in this long died; another may start. One that failed is not retried for a day.
STALE_BUILD_SECONDS = 15 * 60
RETRY_FAILED_SECONDS = 24 * 3600
# A JVM that cannot map the archive (another build of Java, another classpath) says so on stderr at
# every start; it then runs exactly as without the archive.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

_started_here = False


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "auto").strip().lower() not in ("off", "0", "false", "no")


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "incsync"


def java_binary() -> Path | None:
    """The ``java`` spark-submit runs: ``$JAVA_HOME/bin/java``, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(p) if (p := shutil.which("java")) else None)
    if found is None or not found.exists():
        return None
    return found.resolve()


def archive_path() -> Path | None:
    """Where this install's archive lives: named after the Java binary (its path, size and mtime) and
    pyspark (its version and jars), so an upgrade of either makes a new one. None: no Java found."""
    java = java_binary()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    stat = java.stat()
    # "gc=serial": archives made under G1 before the driver ran the serial collector (session.DRIVER_GC) are not reused
    key = "\n".join([str(java), str(stat.st_size), str(stat.st_mtime_ns), pyspark.__version__, str(jars), "gc=serial", *names])
    return cache_dir() / "spark-classes" / f"driver-{hashlib.sha256(key.encode()).hexdigest()[:20]}.jsa"


def java_options() -> str:
    """The driver JVM options that map the archive when it exists ('' otherwise, or when turned off)."""
    if not enabled():
        return ""
    try:
        path = archive_path()
    except Exception:  # noqa: BLE001 - an unreadable cache or Java install only costs the speed-up
        return ""
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def ensure_building() -> bool:
    """Start making the archive in the background unless it exists, is being made, failed lately, or is
    turned off. Returns whether a builder was started (at most once per process)."""
    global _started_here
    if _started_here or not enabled():
        return False
    try:
        path = archive_path()
        if path is None or path.is_file():
            return False
        failed = path.with_suffix(".failed")
        if failed.exists() and time.time() - failed.stat().st_mtime < RETRY_FAILED_SECONDS:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.with_suffix(".building")
        if not _take(lock):
            return False
        _started_here = True
        subprocess.Popen(  # noqa: S603 - our own module, our own interpreter
            [sys.executable, "-m", "incsync.spark.class_archive_build", str(path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, SWITCH_ENV: "off"},  # the builder's own session must not map a half-made archive
        )
        return True
    except Exception:
        log.debug("could not start building the Spark class archive", exc_info=True)
        return False


def _take(lock: Path) -> bool:
    """Create ``lock`` exclusively; a lock older than STALE_BUILD_SECONDS belonged to a builder that died."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime < STALE_BUILD_SECONDS:
                    return False
                lock.unlink()
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False

"""Making the driver's class-data-sharing archive (``class_archive``): run by ``ensure_building`` as
``python -m incsync.spark.class_archive_build <path>``, in a process of its own."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from incsync.spark.class_archive import QUIET
from incsync.spark.session import spark_config, workers_use_this_python


def build(path: Path, *, timeout: float = 600) -> None:
    """Make the archive at ``path``: a local session that dumps its loaded classes when its JVM exits.
    Written to a temporary name and renamed when complete, so a JVM never maps a half-written file."""
    from pyspark.sql import SparkSession

    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    conf = spark_config()
    options = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}".strip()
    conf["spark.app.name"] = "incsync-class-archive"
    workers_use_this_python()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        _workload(spark)
    finally:
        gateway = spark.sparkContext._gateway  # noqa: SLF001 - pyspark keeps the JVM's process there
        proc = getattr(gateway, "proc", None)
        spark.stop()
        if proc is not None:  # the JVM exits when its stdin closes, and writes the archive as it exits
            proc.stdin.close()
            proc.wait(timeout=timeout)
    if not partial.is_file() or partial.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class archive at {partial}")
    os.replace(partial, path)


def _workload(spark) -> None:  # noqa: ANN001 - a SparkSession
    """What a transfer's driver loads: SQL with timestamps and decimals, Arrow collection, Parquet files,
    the JDBC data source's classes (its connection is refused: no database is needed)."""
    from pyspark.sql import functions as F

    df = spark.range(2000).select(
        F.col("id"), (F.col("id") * 1.5).cast("decimal(18,2)").alias("amount"),
        F.timestamp_seconds(F.col("id") + 1_700_000_000).alias("updated_at"), F.concat(F.lit("t"), F.col("id")).alias("name"),
    ).where(F.col("updated_at") >= F.lit("2023-01-01").cast("timestamp"))
    df.toArrow()
    with tempfile.TemporaryDirectory() as tmp:
        df.withColumn("part", F.col("id") % 4).write.partitionBy("part").mode("overwrite").parquet(f"{tmp}/p")
        spark.read.parquet(f"{tmp}/p").groupBy().count().collect()
    try:
        spark.read.format("jdbc").options(url="jdbc:postgresql://127.0.0.1:1/none", dbtable="none",
                                          driver="org.postgresql.Driver").load()
    except Exception:  # noqa: BLE001 - refused, as intended
        pass


# Another install's archive (a removed virtualenv, an older Java) is removed once this old: an install
# that still uses it makes it again, once.
OLD_ARCHIVE_SECONDS = 7 * 24 * 3600


def remove_old_archives(folder: Path, *, keep: Path, now: float | None = None) -> list[str]:
    """Remove the other installs' archives made more than OLD_ARCHIVE_SECONDS ago (each is large); their names."""
    now = time.time() if now is None else now
    removed = []
    for other in folder.glob("driver-*.jsa"):
        try:
            if other != keep and now - other.stat().st_mtime > OLD_ARCHIVE_SECONDS:
                other.unlink()
                removed.append(other.name)
        except OSError:  # another process removed it, or it cannot be: it stays
            continue
    return sorted(removed)


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    lock, failed = path.with_suffix(".building"), path.with_suffix(".failed")
    try:
        build(path)
        failed.unlink(missing_ok=True)
        remove_old_archives(path.parent, keep=path)
        return 0
    except Exception as exc:  # noqa: BLE001 - recorded for a day, so that runs do not retry it each time
        failed.write_text(f"{type(exc).__name__}: {exc}\n")
        return 1
    finally:
        lock.unlink(missing_ok=True)
        for stale in path.parent.glob(f"{path.stem}.*.partial"):
            stale.unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

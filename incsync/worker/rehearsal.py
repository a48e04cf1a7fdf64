"""The worker's warm-up: before it answers, it stages generated rows once through each JDBC driver its
sources use, so that the first transfer's rows do not run through a cold JVM.

A local Spark session that has only started reads and writes its first rows many times slower than its
later ones: the JDBC driver's and the Parquet writer's classes load and the JIT compiles their per-value code
during that first job (a 500,000-row first backfill staged ~3x slower than the same read again in the same
JVM, benchmarks/HISTORY.md "The worker's warm-up"). A Spark Connect server warmed by one transfer had that
for free; the README's worker now does it itself. The rehearsal reads no table of the user's: the rows come
from a generator query (``Dialect.rehearsal``) over each driver's connection, are staged as a transfer stages
(``staging.spark.stage``) into a temporary folder, read back through pyarrow and removed. A source that
cannot be reached is logged and skipped: the worker starts anyway, its first transfer then starts cold.
Each column-tenanted model's source schema is probed too (``probe_schemas``), as a transfer would.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.config.model import IncsyncConfig
from incsync.config.sources import JdbcSourceConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REHEARSAL_ROWS = 100_000  # enough for the JIT to compile the per-row paths; ~1-3 s on a 2-core host


def rehearse(spark: SparkSession, config: IncsyncConfig, *, rows: int = REHEARSAL_ROWS) -> dict[str, int]:
    """Stage ``rows`` generated rows once through each JDBC driver the config's sources use; the rows each
    source's read staged and read back (a source whose read failed is left out)."""
    from incsync.sources.jdbc.source import JdbcSource
    from incsync.staging.spark import stage

    drivers: dict[str, JdbcSourceConfig] = {}
    for source in config.sources:
        if isinstance(source, JdbcSourceConfig):
            drivers.setdefault(source.vendor, source)  # the JIT's work is per driver, not per database
    staged: dict[str, int] = {}
    failed: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="incsync-warm-up-") as folder:
        for vendor, source in drivers.items():
            started = time.monotonic()
            try:
                batch = stage(JdbcSource(source).rehearsal_read(spark, rows), Path(folder) / vendor)
                staged[source.name] = sum(b.num_rows for b in batch.batches())  # a publish's read-back, through pyarrow
            except Exception as exc:  # noqa: BLE001 - a warm-up never stops the worker
                failed.add(source.name)
                log.warning("incsync worker: the warm-up read through source %s failed (%s); the first transfer "
                            "starts with a cold JVM", source.name, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
                continue
            log.info("incsync worker: warmed up %s rows through source %s's driver in %.1f s", batch.rows,
                     source.name, time.monotonic() - started)
    probe_schemas(spark, config, skip=failed)
    return staged


def probe_schemas(spark: SparkSession, config: IncsyncConfig, *, skip: set[str]) -> None:
    """Ask each column-tenanted model's JDBC source for its schema once, as a transfer would (no row read):
    the source keeps it (``sources.jdbc.shape``), so the first transfer checks its description only.
    Sources in ``skip`` (their warm-up read failed) are not asked again."""
    from incsync.sources.jdbc.source import JdbcSource

    anyone = next((r for r in config.recipients if r.enabled), None)
    for model in config.models:
        source = config.source(model.source)
        if anyone is None or model.tenancy != "column" or not isinstance(source, JdbcSourceConfig) or source.name in skip:
            continue
        try:
            JdbcSource(source).probe_schema(spark, model, anyone)
        except Exception as exc:  # noqa: BLE001 - a warm-up never stops the worker; the transfer reports it
            log.info("incsync worker: model %s's source schema was not probed at start (%s)", model.model_name,
                     str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)

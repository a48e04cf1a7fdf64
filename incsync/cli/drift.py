"""Source schema drift before any transfer runs (`incsync validate --connect`): each model's source columns,
as the next transfer would stage them, against what each recipient's destination holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.destinations.registry import Destination, build_destination
from incsync.errors import IncsyncError
from incsync.core.schema_change import SchemaDiff, arrow_diff, pg_diff

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def destination_drift(destination: Destination, *, model: ModelConfig, recipient: RecipientConfig,
                      staged: pa.Schema) -> SchemaDiff | None:
    """What the next publish of a batch with schema ``staged`` would find; None before the first transfer."""
    from incsync.destinations.delta.destination import DeltaDestination
    from incsync.destinations.object_storage.destination import ObjectStorageDestination
    from incsync.destinations.postgres.destination import PostgresDestination
    from incsync.destinations.postgres.schema import published_columns
    from incsync.destinations.postgres.types import pg_type

    if isinstance(destination, PostgresDestination):
        with destination._connect() as conn:
            current = destination._columns(conn, model.model_name)
            published = published_columns(conn, destination.schema, model.model_name) if current else None
        if current is None:
            return None
        return pg_diff(published[0] if published else current, {f.name: pg_type(f) for f in staged})
    if isinstance(destination, DeltaDestination):
        dt = destination._table(model)
        return None if dt is None else arrow_diff(pa.schema(dt.schema().to_arrow()), staged)
    if isinstance(destination, ObjectStorageDestination):
        previous = destination._reader_schema(model, recipient)
        return None if previous is None else arrow_diff(previous, staged)
    if destination.kind in ("duckdb", "iceberg", "mariadb"):
        return destination.drift(model=model, staged=staged)  # type: ignore[attr-defined]
    return None


def describe(diff: SchemaDiff, *, model: ModelConfig, recipient: RecipientConfig) -> str:
    """One line: what drifted and what the next transfer will do about it."""
    if diff.incompatible:
        then = (f"the next transfer fails until a full refresh (incsync transfer {model.model_name} "
                f"--recipient {recipient.id} --full-refresh)")
    elif diff.widened or diff.added:
        then = "the next transfer applies it in place"
    else:
        then = "nothing to do"
    return f"models.{model.model_name} (recipient {recipient.id}): source schema drift: {diff.drift()}; {then}"


def drift_report(config: IncsyncConfig, spark: SparkSession, *, sources: set[str] | None = None) -> list[str]:
    """One line per (model, enabled recipient receiving it) whose source columns differ from its destination's."""
    from incsync.config.products import subscribers
    from incsync.sources.registry import build_source
    from incsync.sources.base import _nothing
    from incsync.staging.spark import spark_parquet_schema

    lines: list[str] = []
    for model in config.models:
        if sources is not None and model.source not in sources:
            continue
        source = build_source(config.source(model.source))
        for recipient in subscribers(config, model.model_name):
            try:
                df = source.read(spark, model=model, recipient=recipient, bounds=_nothing(), rows_hint=0)
                staged = spark_parquet_schema(df)
                destination = build_destination(config.destination(recipient.destination))
                diff = destination_drift(destination, model=model, recipient=recipient, staged=staged)
            except IncsyncError:
                continue  # unreachable sources and destinations are reported by the connectivity check
            if diff:
                lines.append(describe(diff, model=model, recipient=recipient))
    return lines

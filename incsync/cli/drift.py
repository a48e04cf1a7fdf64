"""Source schema drift before any transfer runs (`incsync validate --connect`): each model's source columns,
as the next transfer would stage them, against what each recipient's destination holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.core.schema_change import SchemaDiff
from incsync.destinations.registry import build_destination
from incsync.errors import IncsyncError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
    from incsync.sources.base import _nothing
    from incsync.sources.registry import build_source
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
                diff = destination.drift(model=model, recipient=recipient, staged=staged)
            except IncsyncError:
                continue  # unreachable sources and destinations are reported by the connectivity check
            if diff:
                lines.append(describe(diff, model=model, recipient=recipient))
    return lines

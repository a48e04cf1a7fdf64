"""Sources by vendor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incsync.config import IncsyncConfig, LakeSourceConfig, SourceConfig
from incsync.errors import ConfigError, IncsyncError
from incsync.sources.base import Source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_source(config: SourceConfig) -> Source:
    if isinstance(config, LakeSourceConfig):
        from incsync.sources.lake import LakeSource

        return LakeSource(config)
    try:
        from incsync.sources.jdbc import JdbcSource  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("sources", [f"{config.name}.vendor: {config.vendor} sources are not available yet"]) from None
    return JdbcSource(config)


def check_sources(config: IncsyncConfig, spark: SparkSession, *, sources: set[str] | None = None) -> list[str]:
    """Authorize every model's source ("can we read it?"); one line per problem, empty when all is well.

    A column-tenanted model is checked once (its table is shared by every recipient); a
    schema-tenanted model once per enabled recipient (each has its own schema). ``sources``
    limits the check to the models of those sources.
    """
    problems: list[str] = []
    recipients = [r for r in config.recipients if r.enabled]
    for model in config.models:
        if sources is not None and model.source not in sources:
            continue
        source = build_source(config.source(model.source))
        for recipient in recipients if model.tenancy == "schema" else recipients[:1]:
            try:
                source.check(spark, model=model, recipient=recipient)
            except IncsyncError as exc:
                problems.append(f"models.{model.model_name} (recipient {recipient.id}): {exc}")
    return problems


__all__ = ["Source", "build_source", "check_sources"]

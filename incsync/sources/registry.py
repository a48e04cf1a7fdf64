"""Sources by vendor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incsync.config.model import IncsyncConfig, RecipientConfig
from incsync.config.sources import LakeSourceConfig, SourceConfig
from incsync.errors import IncsyncError
from incsync.sources.base import Source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_source(config: SourceConfig) -> Source:
    if isinstance(config, LakeSourceConfig):
        from incsync.sources.lake import LakeSource

        return LakeSource(config)
    from incsync.sources.jdbc.source import JdbcSource

    return JdbcSource(config)


def check_sources(config: IncsyncConfig, spark: SparkSession, *, sources: set[str] | None = None) -> list[str]:
    """Authorize every model's source ("can we read it?"); one line per problem, empty when all is well.

    A column-tenanted model is checked once (its table is shared by every recipient; with no
    recipient yet, for a tenant value nobody has); a schema-tenanted model once per enabled
    recipient receiving it (each has its own schema). ``sources`` limits the check to those sources' models.
    """
    from incsync.config.products import subscribers

    problems: list[str] = []
    recipients = [r for r in config.recipients if r.enabled]
    anyone = recipients[:1] or [RecipientConfig(id="check", id_in_provider_system="", destination="-")]
    for model in config.models:
        if sources is not None and model.source not in sources:
            continue
        source = build_source(config.source(model.source))
        for recipient in subscribers(config, model.model_name, recipients) if model.tenancy == "schema" else anyone:
            try:
                source.check(spark, model=model, recipient=recipient)
            except IncsyncError as exc:
                problems.append(f"models.{model.model_name} (recipient {recipient.id}): {exc}")
    return problems


__all__ = ["Source", "build_source", "check_sources"]

"""Sources by vendor."""

from __future__ import annotations

from incsync.config import LakeSourceConfig, SourceConfig
from incsync.errors import ConfigError
from incsync.sources.base import Source


def build_source(config: SourceConfig) -> Source:
    if isinstance(config, LakeSourceConfig):
        from incsync.sources.lake import LakeSource

        return LakeSource(config)
    try:
        from incsync.sources.jdbc import JdbcSource  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("sources", [f"{config.name}.vendor: {config.vendor} sources are not available yet"]) from None
    return JdbcSource(config)


__all__ = ["Source", "build_source"]

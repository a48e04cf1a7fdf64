"""Destinations by kind, behind one protocol."""

from __future__ import annotations

from incsync.config.destinations import (
    DeltaDestinationConfig,
    DestinationConfig,
    DuckDBDestinationConfig,
    IcebergDestinationConfig,
    MariaDBDestinationConfig,
    ObjectStorageDestinationConfig,
    PostgresDestinationConfig,
)
from incsync.destinations.base import (
    FULL_REFRESH,
    INCREMENTAL,
    Destination,
    DestinationState,
    TransferRecord,
)
from incsync.errors import ConfigError


def build_destination(config: DestinationConfig) -> Destination:
    if isinstance(config, DeltaDestinationConfig):
        from incsync.destinations.delta.destination import DeltaDestination

        return DeltaDestination(config)
    if isinstance(config, PostgresDestinationConfig):
        from incsync.destinations.postgres.destination import PostgresDestination

        return PostgresDestination(config)
    if isinstance(config, ObjectStorageDestinationConfig):
        from incsync.destinations.object_storage.destination import ObjectStorageDestination

        return ObjectStorageDestination(config)
    if isinstance(config, DuckDBDestinationConfig):
        from incsync.destinations.duckdb.destination import DuckDBDestination

        return DuckDBDestination(config)
    if isinstance(config, IcebergDestinationConfig):
        from incsync.destinations.iceberg.destination import IcebergDestination

        return IcebergDestination(config)
    if isinstance(config, MariaDBDestinationConfig):
        from incsync.destinations.mariadb.destination import MariaDBDestination

        return MariaDBDestination(config)
    raise ConfigError("destinations", [f"{config.name}.kind: {config.kind} destinations are not available yet"])


__all__ = ["FULL_REFRESH", "INCREMENTAL", "Destination", "DestinationState", "TransferRecord", "build_destination"]

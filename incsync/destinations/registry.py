"""Destinations by kind, behind one protocol: the one table naming each kind's class."""

from __future__ import annotations

from importlib import import_module

from incsync.config.destinations import DestinationConfig
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, Destination, DestinationState, TransferRecord
from incsync.errors import ConfigError

# kind (as the file spells it) -> the module and class that keep it; imported on first use
KINDS: dict[str, str] = {
    "delta": "incsync.destinations.delta.destination:DeltaDestination",
    "postgres": "incsync.destinations.postgres.destination:PostgresDestination",
    "object_storage": "incsync.destinations.object_storage.destination:ObjectStorageDestination",
    "duckdb": "incsync.destinations.duckdb.destination:DuckDBDestination",
    "iceberg": "incsync.destinations.iceberg.destination:IcebergDestination",
    "mariadb": "incsync.destinations.mariadb.destination:MariaDBDestination",
    "mysql": "incsync.destinations.mariadb.destination:MariaDBDestination",
}


def destination_class(kind: str) -> type[Destination]:
    module, _, name = KINDS[kind].partition(":")
    cls: type[Destination] = getattr(import_module(module), name)
    return cls


def build_destination(config: DestinationConfig) -> Destination:
    if config.kind not in KINDS:
        raise ConfigError("destinations", [f"{config.name}.kind: {config.kind} destinations are not available yet"])
    return destination_class(config.kind)(config)  # type: ignore[call-arg]  # each kind takes its own config model


__all__ = ["FULL_REFRESH", "INCREMENTAL", "KINDS", "Destination", "DestinationState", "TransferRecord",
           "build_destination", "destination_class"]

"""The file's destinations, one module per kind: Delta tables, a PostgreSQL schema, Parquet files with
manifests, a DuckDB file, Apache Iceberg tables or a MariaDB/MySQL database (``kind`` chooses).

Each kind's model declares what the rest of the file model and the CLI need of it (its starter for
``incsync init``, whether recipients may share it, its secret's field); ``DestinationConfig`` is the one
list of the kinds, and everything else that needs them reads ``DESTINATION_MODELS``.
"""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import Field

from incsync.config.destinations.base import Placed
from incsync.config.destinations.delta import DeltaDestinationConfig
from incsync.config.destinations.duckdb import DuckDBDestinationConfig
from incsync.config.destinations.iceberg import IcebergDestinationConfig
from incsync.config.destinations.mariadb import MariaDBDestinationConfig
from incsync.config.destinations.object_storage import ObjectStorageDestinationConfig
from incsync.config.destinations.postgres import PostgresDestinationConfig

DestinationConfig = Annotated[
    DeltaDestinationConfig | PostgresDestinationConfig | ObjectStorageDestinationConfig | DuckDBDestinationConfig
    | IcebergDestinationConfig | MariaDBDestinationConfig,
    Field(discriminator="kind"),
]


def model_kinds(model: type[Placed]) -> tuple[str, ...]:
    """The ``kind`` values ``model`` accepts, its own name first, then its aliases (``mariadb``, ``mysql``)."""
    return typing.get_args(model.model_fields["kind"].annotation)


# kind (aliases too) -> its model, in the order of DestinationConfig: the docs, messages and `incsync init` read it
DESTINATION_MODELS: dict[str, type[Placed]] = {
    kind: model for model in typing.get_args(typing.get_args(DestinationConfig)[0]) for kind in model_kinds(model)
}


def secret_fields() -> dict[str, str]:
    """kind -> the field a destinations table's `secret` column fills, for the kinds that take one."""
    return {kind: model.secret_field for kind, model in DESTINATION_MODELS.items() if model.secret_field}


__all__ = [
    "DESTINATION_MODELS",
    "DeltaDestinationConfig",
    "DestinationConfig",
    "DuckDBDestinationConfig",
    "IcebergDestinationConfig",
    "MariaDBDestinationConfig",
    "ObjectStorageDestinationConfig",
    "Placed",
    "PostgresDestinationConfig",
    "model_kinds",
    "secret_fields",
]

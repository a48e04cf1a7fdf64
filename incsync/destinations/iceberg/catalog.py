"""The catalog of an Iceberg destination and the table properties incsync keeps in each table.

A SQL catalog (SQLite by default, ``<path>/catalog.db``; PostgreSQL through ``catalog_uri_env``) or a REST
catalog. Each table carries, as table properties committed with its data: the owner stamp
(``incsync.owner``), the last move of ownership (``incsync.ownership``) and each recipient's last transfer
record (``incsync.transfer.<recipient>``). Properties live in every later metadata file, so snapshot expiry
and an engine's compaction keep them; each record also rides in its snapshot's summary (the history).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.config.destinations import IcebergDestinationConfig
from incsync.destinations.base import TransferRecord
from incsync.destinations.ownership import Owner
from incsync.errors import ConfigError
from incsync.storage.filesystems import pyiceberg_properties, resolve_options
from incsync.storage.names import is_url, local_path

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


RECORD_PREFIX = "incsync.transfer."
SUMMARY_KEY = "incsync.transfer"
OWNER_PROPERTY = "incsync.owner"
OWNERSHIP_LOG = "incsync.ownership"
# The catalog's name in its own tables (a SQL catalog keys every table on it): fixed, so renaming a
# destination in the file keeps its tables, and any pyiceberg or Spark client opening the catalog as
# "incsync" finds them.
CATALOG_NAME = "incsync"


def warehouse(config: IcebergDestinationConfig) -> str:
    """The warehouse location as pyiceberg takes it: a storage URL, or a local folder as ``file://``."""
    if is_url(config.path) and not config.path.startswith("file:"):
        return config.path.rstrip("/").replace("s3a://", "s3://", 1)
    return Path(local_path(config.path)).resolve().as_uri()


def catalog_uri(config: IcebergDestinationConfig) -> str:
    if config.catalog_uri_env is None:
        if config.catalog == "rest":
            raise ConfigError("destinations", [f"{config.name}.catalog_uri_env: a REST catalog needs the variable "
                                               "holding its URL (https://...)"])
        return f"sqlite:///{Path(local_path(config.path)).resolve() / 'catalog.db'}" if not is_url(config.path) else ""
    uri = os.environ.get(config.catalog_uri_env)
    if not uri:
        raise ConfigError("environment", [f"destinations[{config.name}].catalog_uri_env: variable {config.catalog_uri_env} "
                                          "is not set; export the catalog URI before running"])
    if uri.startswith("postgresql://"):
        uri = "postgresql+psycopg2://" + uri.removeprefix("postgresql://")  # pyiceberg's sql-postgres extra's driver
    return uri


def scrub(message: str, config: IcebergDestinationConfig) -> str:
    """``message`` without the catalog URI (it may hold a password): its variable's name instead."""
    uri = os.environ.get(config.catalog_uri_env or "")
    if not uri:
        return message
    for form in {uri, catalog_uri(config)}:
        message = message.replace(form, f"${config.catalog_uri_env}")
    return message


def remote_options(config: IcebergDestinationConfig) -> dict[str, str] | None:
    """The storage options (secrets resolved) reading a warehouse on object storage; None for a local folder."""
    if not is_url(config.path) or config.path.startswith("file:"):
        return None
    return resolve_options(config.storage_options, f"destinations[{config.name}].storage_options")


def io_properties(config: IcebergDestinationConfig) -> dict[str, str]:
    return pyiceberg_properties(resolve_options(config.storage_options, f"destinations[{config.name}].storage_options"))


def open_catalog(config: IcebergDestinationConfig) -> Catalog:
    """The catalog, its namespace created when missing (a new SQLite catalog creates its file and tables)."""
    uri = catalog_uri(config)
    if not uri:
        raise ConfigError("destinations", [f"{config.name}.catalog_uri_env: a warehouse in object storage needs a catalog "
                                           "database: name the variable holding its URI (postgresql://...)"])
    props = {"uri": uri, "warehouse": warehouse(config), **io_properties(config)}
    if config.catalog == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        catalog = RestCatalog(CATALOG_NAME, **props)
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        if uri.startswith("sqlite:"):
            Path(local_path(config.path)).mkdir(parents=True, exist_ok=True)
        catalog = SqlCatalog(CATALOG_NAME, **props)
    catalog.create_namespace_if_not_exists(config.namespace)
    return catalog


def record_of(properties: dict[str, str], recipient: str) -> TransferRecord | None:
    raw = properties.get(RECORD_PREFIX + recipient)
    return None if raw is None else TransferRecord.from_json(raw)


def logged_recipients(properties: dict[str, str]) -> list[str]:
    return sorted(k.removeprefix(RECORD_PREFIX) for k in properties if k.startswith(RECORD_PREFIX))


def owner_of_table(properties: dict[str, str]) -> Owner | None:
    raw = properties.get(OWNER_PROPERTY)
    return None if raw is None else Owner.from_json(raw)

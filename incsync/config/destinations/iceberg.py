"""`kind: iceberg`: Apache Iceberg tables in a namespace of a SQL or REST catalog."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from incsync.config.destinations.base import CONCURRENCY_HELP, NAME_HELP, Placed
from incsync.config.locations import Location, folder_or_url


class IcebergDestinationConfig(Placed):
    """Apache Iceberg tables through pyiceberg: one table per model in `namespace` of a SQL (or REST) catalog."""

    name: str = Field(description=NAME_HELP)
    kind: Literal["iceberg"] = Field(description="`iceberg`.")
    path: str = Field(
        description="The warehouse: folder (or s3:// URL) of the tables' data and metadata files; relative paths "
        "are relative to the file.",
    )
    namespace: str = Field(default="incsync", description="Catalog namespace of the tables, created when missing.")
    catalog: Literal["sql", "rest"] = Field(
        default="sql",
        description="`sql`: a SQLAlchemy catalog database (SQLite, PostgreSQL); `rest`: an Iceberg REST catalog.",
    )
    catalog_uri_env: str | None = Field(
        default=None,
        description="Name of the variable holding the catalog URI (`postgresql+psycopg2://...` for a PostgreSQL "
        "catalog, `https://...` for REST); default: the SQLite file `<path>/catalog.db`.",
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Object-store settings in delta-rs's names (aws_region, aws_endpoint_url, ...), passed to "
        "pyiceberg as its s3.* properties; a secret is `<name>_env: VARIABLE`, never its value (docs/storage.md).",
    )
    max_concurrent_transfers: int = Field(default=1, ge=1, description=CONCURRENCY_HELP)
    retention_hours: int = Field(
        default=168, ge=0,
        description="`incsync maintain` expires snapshots older than this (the current one always stays), so "
        "time travel reaches back this far.",
    )
    served_by_sharing: ClassVar[bool] = True

    starter: ClassVar[str] = """\
  - name: acme_iceberg
    kind: iceberg
    path: ./out/acme_iceberg  # the warehouse: data + metadata files, and the SQLite catalog ./out/acme_iceberg/catalog.db
    namespace: acme           # the catalog namespace: table acme.orders; one recipient's copy
    # catalog_uri_env: ACME_CATALOG  # a PostgreSQL catalog instead: the variable holding postgresql://...
"""

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        # A copy is a (catalog, namespace); the default catalog lives in the warehouse.
        catalog = self.catalog_uri_env
        key = f"env:{catalog}" if catalog else folder_or_url(self.path, base, folders=folders)
        shown = f"Iceberg catalog {'$' + catalog if catalog else key} namespace {self.namespace}"
        return Location("iceberg", f"{key}::{self.namespace}", shown)

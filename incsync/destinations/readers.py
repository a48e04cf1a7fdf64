"""Reading a recipient's copy back as a reader of each destination kind sees it: for ``incsync demo``,
verify and the tests. Publishing never reads rows back, so this is no part of the destination protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.destinations.base import Destination

if TYPE_CHECKING:
    from incsync.destinations.delta.destination import DeltaDestination
    from incsync.destinations.duckdb.destination import DuckDBDestination
    from incsync.destinations.iceberg.destination import IcebergDestination
    from incsync.destinations.mariadb.destination import MariaDBDestination
    from incsync.destinations.object_storage.destination import ObjectStorageDestination
    from incsync.destinations.postgres.destination import PostgresDestination


def read_delta(destination: DeltaDestination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """The Delta table's rows (``recipient`` owns the whole table); empty before the first transfer."""
    dt = destination._table(model)
    return dt.to_pyarrow_table() if dt is not None else pa.table({})


def read_postgres(destination: PostgresDestination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """The PostgreSQL table's rows (``recipient`` owns the schema's table); empty before the first transfer."""
    from psycopg import sql

    with destination._connect() as conn:
        if destination._columns(conn, model.model_name) is None:
            return pa.table({})
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(destination._ident(model.model_name)))
        names = [d.name for d in cur.description or []]
        rows = cur.fetchall()
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows]) if rows else pa.table({n: [] for n in names})


def read_object_storage(destination: ObjectStorageDestination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """Every row of the recipient's committed manifests: an append log, so a key may occur once per transfer."""
    from incsync.destinations.object_storage.reader import read_manifested

    return read_manifested(destination.store, model.model_name, recipient.id, private=destination.config.disable_manifest)


def read_duckdb(destination: DuckDBDestination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """The DuckDB table's rows (``recipient`` owns the file's table); empty before the first transfer."""
    with destination.connect() as con:
        if not destination.has_table(con, model):
            return pa.table({})
        return con.sql(f"SELECT * FROM {destination.target(model)}").to_arrow_table()


def read_iceberg(destination: IcebergDestination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """The Iceberg table's current snapshot as pyiceberg reads it; empty before the first transfer."""
    table = destination.table(model)
    return table.scan().to_arrow() if table is not None else pa.table({})


def read_mariadb(destination: MariaDBDestination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """The MariaDB table's rows (``recipient`` owns the database's table); empty before the first transfer."""
    return destination.read(model)


READERS: dict[str, Callable[..., pa.Table]] = {
    "delta": read_delta,
    "postgres": read_postgres,
    "object_storage": read_object_storage,
    "duckdb": read_duckdb,
    "iceberg": read_iceberg,
    "mariadb": read_mariadb,
}


def read_rows(destination: Destination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """Everything a reader of ``destination`` sees for (model, recipient)."""
    return READERS[destination.kind](destination, model=model, recipient=recipient)


def current_rows(destination: Destination, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
    """What the recipient's copy holds now: object storage's append log reduced to each key's newest row."""
    table = read_rows(destination, model=model, recipient=recipient)
    if destination.kind != "object_storage" or table.num_rows == 0:
        return table
    from incsync.destinations.object_storage.reader import latest_versions

    return latest_versions(table, list(model.primary_key), model.last_modified_column)


def location(destination: Destination, *, model: ModelConfig, recipient: RecipientConfig) -> str:
    """Where a reader finds the recipient's copy: a Delta table's path, a SQL relation, a manifest prefix."""
    if destination.kind == "delta":
        return destination.table_path(model)  # type: ignore[attr-defined]
    if destination.kind == "postgres":
        return f'"{destination.schema}"."{model.model_name}"'  # type: ignore[attr-defined]
    if destination.kind == "duckdb":
        return f'{destination.path} "{destination.schema}"."{model.model_name}"'  # type: ignore[attr-defined]
    if destination.kind == "iceberg":
        return f"{destination.config.path} {destination.identifier(model)}"  # type: ignore[attr-defined]
    if destination.kind == "mariadb":
        return f"`{destination.database}`.`{model.model_name}`"  # type: ignore[attr-defined]
    return f"{destination.root.rstrip('/')}/{model.model_name}/recipient={recipient.id}"  # type: ignore[attr-defined]


class PublishedCopies:
    """What a downstream asset receives for a model: each recipient's published copy, read on demand.

    ``location(r)`` says where a reader of the destination finds it; ``read(r)`` returns what the copy
    holds now (object storage's append log reduced to each key's newest row) as an Arrow table.
    """

    def __init__(self, model: ModelConfig, copies: dict[str, tuple[RecipientConfig, Destination]]):
        self.model = model
        self._copies = copies

    @property
    def recipients(self) -> list[str]:
        return sorted(self._copies)

    def _copy(self, recipient_id: str) -> tuple[RecipientConfig, Destination]:
        try:
            return self._copies[recipient_id]
        except KeyError:
            raise KeyError(f"recipient {recipient_id!r} is not among this input's recipients {self.recipients}") from None

    def location(self, recipient_id: str) -> str:
        recipient, destination = self._copy(recipient_id)
        return location(destination, model=self.model, recipient=recipient)

    def read(self, recipient_id: str) -> pa.Table:
        recipient, destination = self._copy(recipient_id)
        return current_rows(destination, model=self.model, recipient=recipient)

"""A MariaDB destination table as Arrow: its columns' types (``types.arrow_type``, the column registry
telling which ``DATETIME`` columns hold UTC instants) and its rows, as a reader of the copy sees them."""

from __future__ import annotations

import json
from datetime import datetime, time, timedelta
from decimal import Decimal

import pyarrow as pa

from incsync.destinations.base import DELETED_AT
from incsync.destinations.mariadb import log
from incsync.destinations.mariadb.connect import Connection, rows, table
from incsync.destinations.mariadb.types import arrow_type


def table_schema(conn: Connection, database: str, model: str, registered: log.Published | None,
                 *, zoned: set[str] = frozenset()) -> pa.Schema | None:  # type: ignore[assignment]  # a frozenset default for a set parameter the function only reads
    """The table's columns as Arrow types; None without the table. ``zoned``: further columns known to
    hold UTC instants (the batch's, when the registry does not know the table yet)."""
    columns = log.table_columns(conn, database, model)
    if columns is None:
        return None
    utc = {DELETED_AT, *zoned}
    if registered is not None:
        utc |= {c for c, t in registered[0].items() if "tz=" in t}
    return pa.schema([(c, arrow_type(d, ct, p, s, zoned=c in utc)) for c, d, ct, p, s in columns])


def _value(value: object, t: pa.DataType) -> object:
    if value is None:
        return None
    if pa.types.is_time(t) and isinstance(value, timedelta):
        return (datetime.min + value).time() if timedelta(0) <= value < timedelta(days=1) else value
    if pa.types.is_boolean(t):
        return bool(value)
    if pa.types.is_string(t) and isinstance(value, (bytes, bytearray)):
        return value.decode()
    if pa.types.is_string(t) and isinstance(value, (Decimal, int, float, datetime, time)):
        return str(value)
    return value


NESTED = ("list", "large_list", "fixed_size_list", "struct", "map")


def read_table(conn: Connection, database: str, model: str) -> pa.Table:
    """Every row of ``database.model``; an empty table without columns when there is none. Columns the
    registry knows were nested (lists, structs, maps) come back as such, from their JSON."""
    registered = log.published(conn, database, model)
    schema = table_schema(conn, database, model, registered)
    if schema is None:
        return pa.table({})
    nested = {c for c, t in (registered[0] if registered else {}).items() if t.startswith(NESTED)}
    found = rows(conn, f"SELECT * FROM {table(database, model)}")
    arrays = []
    for i, f in enumerate(schema):
        if f.name in nested:
            arrays.append(pa.array([None if r[i] is None else json.loads(r[i]) for r in found]))
        else:
            arrays.append(pa.array([_value(r[i], f.type) for r in found], f.type))
    return pa.Table.from_arrays(arrays, names=schema.names)

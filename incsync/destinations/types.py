"""How staged Arrow types land in each destination engine: Delta's forms and kinds of value, PostgreSQL's own source types."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from incsync.core.typemap import SOURCE_TYPE, SOURCE_VENDOR


def delta_form(schema: pa.Schema) -> pa.Schema:
    """Delta has no time of day and no decimal past 38 digits: those columns go as their exact text."""
    fields = []
    for f in schema:
        if pa.types.is_time(f.type) or pa.types.is_decimal256(f.type):
            f = f.with_type(pa.string())
        fields.append(f.remove_metadata())
    return pa.schema(fields, metadata=schema.metadata)


def to_delta(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    return pa.RecordBatch.from_arrays(
        [col if col.type == f.type else _as_text(col) for col, f in zip(batch.columns, schema, strict=True)],
        schema=schema,
    )


def _as_text(values: pa.Array) -> pa.Array:
    """Exact text: decimals in plain notation with their scale (Arrow would write 1E-30), times as HH:MM:SS.ffffff."""
    if pa.types.is_decimal(values.type):
        return pa.array([None if v is None else format(v, "f") for v in values.to_pylist()], pa.string())
    return pc.cast(values, pa.string())


# PostgreSQL types a PostgreSQL destination re-creates as the source has them (enums and other
# user-defined types go as text: the destination has no such type).
_PG_KEEP = {
    "smallint", "integer", "bigint", "real", "double precision", "numeric", "boolean", "text", "character varying",
    "character", "uuid", "json", "jsonb", "inet", "cidr", "macaddr", "macaddr8", "interval", "date", "bytea",
    "time without time zone", "time with time zone", "timestamp without time zone", "timestamp with time zone",
    "bit", "bit varying",
}
_TEXT_INPUT = {"numeric", "character varying", "character", "text", "uuid", "json", "jsonb", "inet", "cidr",
               "macaddr", "macaddr8", "interval", "time with time zone", "bit", "bit varying"}


def postgres_source_type(field: pa.Field) -> str | None:
    """The source's own PostgreSQL type for a staged column read from PostgreSQL, when the staged values
    load into it exactly; None: derive the type from Arrow."""
    meta = field.metadata or {}
    if meta.get(SOURCE_VENDOR) != b"postgres" or SOURCE_TYPE not in meta:
        return None
    spelled = meta[SOURCE_TYPE].decode()
    is_array = spelled.endswith("[]")
    base = re.sub(r"\(\d+(,\d+)?\)", "", spelled.removesuffix("[]")).strip()
    if base not in _PG_KEEP:
        return None
    t = field.type
    if is_array:
        return spelled if pa.types.is_list(t) or pa.types.is_large_list(t) else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return spelled if base in _TEXT_INPUT else None
    if pa.types.is_decimal(t):
        return spelled if base == "numeric" else None
    if pa.types.is_time(t):
        return spelled if base == "time without time zone" else None
    if pa.types.is_timestamp(t):
        return spelled if (t.tz is not None) == (base == "timestamp with time zone") else None
    return None


def _kind(t: pa.DataType) -> str:
    for name, check in (("text", pa.types.is_string), ("text", pa.types.is_large_string), ("timestamp", pa.types.is_timestamp),
                        ("decimal", pa.types.is_decimal), ("integer", pa.types.is_integer), ("float", pa.types.is_floating),
                        ("boolean", pa.types.is_boolean), ("date", pa.types.is_date), ("time", pa.types.is_time),
                        ("binary", pa.types.is_binary), ("binary", pa.types.is_large_binary), ("nested", pa.types.is_nested)):
        if check(t):
            return name
    return str(t)


def changed_kinds(current: pa.Schema, incoming: pa.Schema) -> list[str]:
    """Columns whose kind of value (text, timestamp, decimal, ...) differs between a table and a batch:
    a merge would fail or misread them (e.g. a TIME once staged as a timestamp, now as exact text)."""
    have = {f.name: f.type for f in current}
    return [
        f'column "{f.name}" holds {have[f.name]} in the table but {f.type} in the batch'
        for f in incoming
        if f.name in have and _kind(have[f.name]) != _kind(f.type)
    ]

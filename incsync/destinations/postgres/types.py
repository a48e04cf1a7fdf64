"""The PostgreSQL type of a staged column: a PostgreSQL source's own where it loads exactly, else by Arrow."""

from __future__ import annotations

import pyarrow as pa

from incsync.destinations.types import postgres_source_type
from incsync.errors import SchemaError


def pg_type(field: pa.Field) -> str:
    """The PostgreSQL type of a staged column, spelled as ``format_type`` prints it: a PostgreSQL source's
    own type where the values load into it exactly (jsonb, inet, time, arrays, numeric(p,s)...), else by Arrow."""
    return postgres_source_type(field) or _arrow_pg_type(field)


def _arrow_pg_type(field: pa.Field) -> str:
    t = field.type
    if isinstance(t, pa.ExtensionType):
        if t.extension_name == "arrow.json":
            return "jsonb"
        t = t.storage_type
    checks = [
        (pa.types.is_boolean, "boolean"),
        (lambda x: pa.types.is_int8(x) or pa.types.is_int16(x) or pa.types.is_uint8(x), "smallint"),
        (lambda x: pa.types.is_int32(x) or pa.types.is_uint16(x), "integer"),
        (lambda x: pa.types.is_int64(x) or pa.types.is_uint32(x), "bigint"),
        (pa.types.is_uint64, "numeric(20,0)"),
        (lambda x: pa.types.is_float16(x) or pa.types.is_float32(x), "real"),
        (pa.types.is_float64, "double precision"),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x) or pa.types.is_string_view(x), "text"),
        (lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_fixed_size_binary(x), "bytea"),
        (pa.types.is_date, "date"),
        (pa.types.is_time, "time without time zone"),
        (lambda x: pa.types.is_list(x) or pa.types.is_large_list(x) or pa.types.is_struct(x) or pa.types.is_map(x), "jsonb"),
    ]
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    for check, name in checks:
        if check(t):
            return name
    raise SchemaError(f'column "{field.name}" has type {t}, which the PostgreSQL destination cannot store; '
                      "cast it in the model's source_query")


def jsonish(field: pa.Field) -> bool:
    """Nested Arrow values stored as jsonb (a PostgreSQL array column takes them as lists instead)."""
    return pa.types.is_nested(field.type) and pg_type(field) == "jsonb" and not isinstance(field.type, pa.ExtensionType)

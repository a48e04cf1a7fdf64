"""How staged Arrow types land in an Iceberg table (docs/types.md), and the widenings Iceberg applies in place.

Iceberg has int (32 bits), long, float, double, decimal(P,S) up to 38 digits, date, time (µs), timestamp and
timestamptz (µs), string, binary, lists, maps and structs. 8- and 16-bit integers are stored as int; an
unsigned 64-bit integer as decimal(20,0); a decimal past 38 digits as its exact text; nanoseconds only
when they are whole microseconds (otherwise the publish fails naming the column). Iceberg promotes
int→long, float→double and decimal(P,S)→decimal(P',S) in place; any other change waits for a full refresh.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from incsync.core.schema_change import SchemaDiff, TypeChange, arrow_type_name
from incsync.destinations.iceberg.compat import iceberg_type
from incsync.destinations.types import _as_text
from incsync.errors import SchemaError


def _field_form(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal256(t) or (pa.types.is_decimal(t) and t.precision > 38):
        return pa.string()
    if pa.types.is_integer(t):
        if t == pa.uint64():
            return pa.decimal128(20, 0)
        return pa.int64() if t.bit_width == 64 or t == pa.uint32() else pa.int32()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_time(t):
        return pa.time64("us")
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_field_form(t.value_type))
    return t


def iceberg_form(schema: pa.Schema) -> pa.Schema:
    """The batch's schema as an Iceberg table stores it (read back through pyiceberg)."""
    return pa.schema([pa.field(f.name, _field_form(f.type)) for f in schema])


def conform_rows(rows: pa.Table, schema: pa.Schema, *, where: str) -> pa.Table:
    """``rows`` with ``schema``'s columns and types (missing ones NULL): exactly, or a SchemaError naming the column."""
    columns = []
    for f in schema:
        if f.name not in rows.column_names:
            columns.append(pa.nulls(rows.num_rows, f.type))
            continue
        column = rows[f.name]
        if column.type == f.type:
            columns.append(column)
        elif pa.types.is_string(f.type) and pa.types.is_decimal(column.type):
            columns.append(pa.chunked_array([_as_text(c) for c in column.chunks], pa.string()))
        else:
            try:
                columns.append(pc.cast(column, f.type, safe=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(
                    f"{where}: column {f.name} holds {column.type} values that Iceberg's {f.type} cannot store exactly "
                    f"({exc}); docs/types.md lists what each type becomes. Nothing was committed."
                ) from exc
    return pa.Table.from_arrays(columns, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def promotes(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether Iceberg's schema evolution widens ``old`` to ``new`` without rewriting data files."""
    if old == pa.int32() and new == pa.int64():
        return True
    if old == pa.float32() and new == pa.float64():
        return True
    return pa.types.is_decimal(old) and pa.types.is_decimal(new) and new.scale == old.scale and new.precision > old.precision


def unpromotable(change: SchemaDiff, current: pa.Schema, form: pa.Schema) -> tuple[TypeChange, ...]:
    """The widenings of ``change`` Iceberg cannot apply in place (int→double, a decimal's scale, ...)."""
    return tuple(c for c in change.widened if not promotes(current.field(c.column).type, form.field(c.column).type))


def unpromotable_error(where: str, table: str, changes: tuple[TypeChange, ...], *, model: str, recipient: str) -> SchemaError:
    described = "; ".join(f"column {c}" for c in changes)
    return SchemaError(
        f"{where}: Iceberg table {table} cannot widen in place: {described} (Iceberg promotes only int→long, "
        f"float→double and a decimal's precision at the same scale). Nothing was committed; run a full refresh "
        f"(incsync transfer {model} --recipient {recipient} --full-refresh) to rewrite the table with the new types."
    )


__all__ = ["arrow_type_name", "conform_rows", "iceberg_form", "iceberg_type", "promotes", "unpromotable"]

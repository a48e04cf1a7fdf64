"""How staged Arrow types land in a MariaDB/MySQL destination table, and how its columns read back.

| Arrow (staged) | MariaDB |
|---|---|
| bool | ``BOOLEAN`` (``tinyint(1)``) |
| int8 … int64, uint8 … uint64 | ``TINYINT`` … ``BIGINT`` (``UNSIGNED`` for unsigned) |
| float32 / float64 | ``FLOAT`` / ``DOUBLE`` (NaN and ±Infinity refused: MariaDB has none) |
| decimal(p,s), p ≤ 65, 0 ≤ s ≤ 30 | ``DECIMAL(p,s)`` |
| decimal(p,s) past that | ``LONGTEXT``: its exact text |
| string | ``LONGTEXT`` (key columns ``VARCHAR(n)``), utf8mb4, binary NO PAD collation |
| binary | ``LONGBLOB`` (key columns ``VARBINARY(n)``) |
| date32 / time64 | ``DATE`` / ``TIME(6)`` |
| timestamp (with or without zone) | ``DATETIME(6)``: a zoned one holds its UTC wall clock |
| list / struct / map, JSON text | ``JSON`` |

``DATETIME`` spans years 1 to 9999 to the microsecond; ``TIMESTAMP`` stops in 2038, so it is not used. Which
``DATETIME`` columns hold UTC instants is kept in the column registry (``log.COLUMNS``).
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from incsync.errors import PublishError, SchemaError

KEY_BYTES = 3072  # InnoDB's longest index key
MAX_PRECISION, MAX_SCALE = 65, 30


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t) or (isinstance(t, pa.ExtensionType) and t.extension_name == "arrow.json")


def _fits_decimal(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t) and t.precision <= MAX_PRECISION and 0 <= t.scale <= MAX_SCALE


def mariadb_form(schema: pa.Schema) -> pa.Schema:
    """The batch's schema as a MariaDB table gives it back: JSON and decimals past DECIMAL(65,30) as text,
    every timestamp in microseconds, large kinds as plain ones."""
    fields = []
    for f in schema:
        t = f.type
        if _nested(t) or (pa.types.is_decimal(t) and not _fits_decimal(t)):
            t = pa.string()
        elif pa.types.is_decimal(t):
            t = pa.decimal128(t.precision, t.scale) if t.precision <= 38 else pa.decimal256(t.precision, t.scale)
        elif pa.types.is_large_string(t) or pa.types.is_string_view(t):
            t = pa.string()
        elif pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
            t = pa.binary()
        elif pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC" if t.tz else None)
        elif pa.types.is_time(t):
            t = pa.time64("us")
        elif pa.types.is_date64(t):
            t = pa.date32()
        elif pa.types.is_float16(t):
            t = pa.float32()
        fields.append(pa.field(f.name, t))
    return pa.schema(fields)


_INTS = {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}


def column_type(field: pa.Field, *, key_chars: int | None, collation: str) -> str:
    """The MariaDB type of a column of ``mariadb_form`` (``key_chars``: a key column, its longest text)."""
    t = field.type
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_integer(t):
        return _INTS[t.bit_width] + ("" if pa.types.is_signed_integer(t) else " UNSIGNED")
    if pa.types.is_floating(t):
        return "FLOAT" if t.bit_width == 32 else "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t):
        text = f"VARCHAR({key_chars})" if key_chars else "LONGTEXT"
        return f"{text} CHARACTER SET utf8mb4 COLLATE {collation}"
    if pa.types.is_binary(t):
        return f"VARBINARY({key_chars * 4})" if key_chars else "LONGBLOB"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_time(t):
        return "TIME(6)"
    if pa.types.is_timestamp(t):
        return "DATETIME(6)"
    raise SchemaError(f'column "{field.name}" has type {t}, which the MariaDB destination cannot store; cast it in the '
                      "model's source_query")


def json_columns(schema: pa.Schema) -> set[str]:
    """Columns whose values go as JSON text (nested values, JSON text): created as ``JSON``."""
    return {f.name for f in schema if _nested(f.type)}


def key_chars(form: pa.Schema, key: tuple[str, ...]) -> int:
    """Characters a text (or bytes/4 a binary) key column may hold, so the whole key fits InnoDB's index."""
    texty = [c for c in key if pa.types.is_string(form.field(c).type) or pa.types.is_binary(form.field(c).type)]
    if not texty:
        return 0
    others = (len(key) - len(texty)) * 32
    return max(16, min(768, (KEY_BYTES - others) // (4 * len(texty))))


def arrow_type(data_type: str, column_type: str, precision: int | None, scale: int | None, *, zoned: bool) -> pa.DataType:
    """The Arrow type a column reads back as, from ``information_schema.COLUMNS``."""
    unsigned = "unsigned" in column_type
    data_type = data_type.lower()
    if data_type == "tinyint" and column_type.startswith("tinyint(1)"):
        return pa.bool_()
    ints = {"tinyint": 8, "smallint": 16, "mediumint": 32, "int": 32, "bigint": 64}
    if data_type in ints:
        bits = ints[data_type]
        return getattr(pa, f"{'u' if unsigned else ''}int{bits}")()
    if data_type == "float":
        return pa.float32()
    if data_type == "double":
        return pa.float64()
    if data_type == "decimal":
        p, s = int(precision or 10), int(scale or 0)
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    if data_type == "date":
        return pa.date32()
    if data_type == "time":
        return pa.time64("us")
    if data_type == "datetime":
        return pa.timestamp("us", tz="UTC" if zoned else None)
    if data_type == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if data_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"):
        return pa.binary()
    return pa.string()


def refuse_non_finite(batch: pa.RecordBatch, key: tuple[str, ...], *, where: str) -> None:
    """NaN and ±Infinity have no MariaDB form: the publish fails naming the column and a key."""
    for f, column in zip(batch.schema, batch.columns, strict=True):
        if not pa.types.is_floating(f.type) or column.null_count == len(column):
            continue
        finite = pc.is_finite(column)
        bad = pc.and_(pc.is_valid(column), pc.invert(finite))
        if pc.any(bad).as_py():
            i = pc.index(bad, True).as_py()
            value = column[i].as_py()
            shown = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
            example = ", ".join(f"{c}={batch.column(c)[i].as_py()!r}" for c in key)
            raise PublishError(
                f'{where}: column "{f.name}" holds {shown} (key {example}), which MariaDB has no value for; nothing was '
                f"published. Fix: map it to NULL or a number in the model's source_query, or read the column as text "
                f"(column_types: {{{f.name}: text}}).")

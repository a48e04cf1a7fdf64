"""One text form per value, the same in every engine that verify pushes work into.

A row's bucket is the low bits of ``md5(primary key text)``; its hash the first 64 bits of
``md5(row text)``, a bucket's fingerprint (row count, sum of hashes mod 2**64). The row text joins each
compared column's canonical text (NULL as ``\\N``) with the unit separator, columns in name order:

| kind | text | PostgreSQL | MariaDB | Spark | Arrow |
|---|---|---|---|---|---|
| int, decimal, text | the engine's text (decimals with their scale) | ``x::text`` | ``CAST(x AS CHAR)`` | ``cast(x as string)`` | ``cast(string)`` |
| bool | ``1`` / ``0`` | ``x::int`` | ``x <> 0`` | ``cast(x as int)`` | ``cast(int8)`` |
| timestamp (with or without zone) | microseconds since the epoch | ``extract(epoch ...)`` | ``TIMESTAMPDIFF(MICROSECOND ...)`` | ``unix_micros`` | ``cast(int64)`` |
| date | days since the epoch | ``x - DATE '1970-01-01'`` | ``DATEDIFF`` | ``unix_date`` | ``cast(int32)`` |

PostgreSQL's 'infinity' / '-infinity' read as the greatest / least microsecond (day), as staging holds
them (``incsync.core.typemap.INFINITY``).

Forms that still differ between two engines (floats, binary, nested values) only cost speed: such a
bucket differs and is compared row by row, in Python, on typed values.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from incsync.core.typemap import INFINITY

if TYPE_CHECKING:  # numpy and pyarrow are imported where rows are compared: a code server loads neither
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

SEPARATOR = "\x1f"
NULL_TEXT = "\\N"
MASK64 = (1 << 64) - 1


class Kind(enum.Enum):
    INT = "int"
    DECIMAL = "decimal"
    TEXT = "text"
    BOOL = "bool"
    TS = "timestamp"
    DATE = "date"
    FLOAT = "float"
    OTHER = "other"


_PG_KINDS = {
    "int2": Kind.INT, "int4": Kind.INT, "int8": Kind.INT, "smallint": Kind.INT, "integer": Kind.INT, "bigint": Kind.INT,
    "numeric": Kind.DECIMAL, "bool": Kind.BOOL, "boolean": Kind.BOOL,
    "timestamptz": Kind.TS, "timestamp": Kind.TS, "timestamp with time zone": Kind.TS,
    "timestamp without time zone": Kind.TS, "date": Kind.DATE,
    "float4": Kind.FLOAT, "float8": Kind.FLOAT, "real": Kind.FLOAT, "double precision": Kind.FLOAT,
}


def kind_from_pg(type_name: str) -> Kind:
    """By ``pg_type.typname`` or ``format_type`` (``numeric(12,2)``, ``timestamp(6) with time zone``)."""
    base = type_name.split("(")[0].strip()
    if base == "timestamp" and "with time zone" in type_name:
        return Kind.TS
    return _PG_KINDS.get(base, Kind.TEXT if base in ("text", "varchar", "character varying", "bpchar", "character") else Kind.OTHER)


def kind_from_spark(data_type: DataType) -> Kind:
    name = type(data_type).__name__
    return {
        "ByteType": Kind.INT, "ShortType": Kind.INT, "IntegerType": Kind.INT, "LongType": Kind.INT,
        "DecimalType": Kind.DECIMAL, "StringType": Kind.TEXT, "VarcharType": Kind.TEXT, "CharType": Kind.TEXT,
        "BooleanType": Kind.BOOL, "TimestampType": Kind.TS, "TimestampNTZType": Kind.TS, "DateType": Kind.DATE,
        "FloatType": Kind.FLOAT, "DoubleType": Kind.FLOAT,
    }.get(name, Kind.OTHER)


def kind_from_arrow(t: pa.DataType) -> Kind:
    import pyarrow as pa
    if pa.types.is_integer(t):
        return Kind.INT
    if pa.types.is_decimal(t):
        return Kind.DECIMAL
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return Kind.TEXT
    if pa.types.is_boolean(t):
        return Kind.BOOL
    if pa.types.is_timestamp(t):
        return Kind.TS
    if pa.types.is_date(t):
        return Kind.DATE
    if pa.types.is_floating(t):
        return Kind.FLOAT
    return Kind.OTHER


def _pg_one(expr: str, kind: Kind) -> str:
    if kind is Kind.BOOL:
        text = f"({expr})::int::text"
    elif kind is Kind.TS:
        text = _pg_infinite(expr, "timestamp", f"(extract(epoch from {expr}) * 1000000)::numeric(20,0)::text")
    elif kind is Kind.DATE:
        text = _pg_infinite(expr, "date", f"(({expr}) - DATE '1970-01-01')::text")
    else:
        text = f"({expr})::text"
    return f"coalesce({text}, E'\\\\N')"


def _pg_infinite(expr: str, kind: str, finite: str) -> str:
    least, greatest = INFINITY[kind]
    return f"CASE WHEN ({expr}) = 'infinity' THEN '{greatest}' WHEN ({expr}) = '-infinity' THEN '{least}' ELSE {finite} END"


def _mysql_one(expr: str, kind: Kind) -> str:
    if kind is Kind.BOOL:
        text = f"CAST(({expr}) <> 0 AS CHAR)"
    elif kind is Kind.TS:
        text = f"CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {expr}) AS CHAR)"
    elif kind is Kind.DATE:
        text = f"CAST(DATEDIFF({expr}, '1970-01-01') AS CHAR)"
    else:
        text = f"CAST({expr} AS CHAR)"
    return f"COALESCE(CONVERT({text} USING utf8mb4), '\\\\N')"


def sql_text(vendor: str, columns: list[tuple[str, Kind]]) -> str:
    """The canonical row text of ``(quoted column, kind)`` pairs, as a SQL expression."""
    if vendor == "postgres":
        return " || chr(31) || ".join(_pg_one(c, k) for c, k in columns)
    parts = ", ".join(_mysql_one(c, k) for c, k in columns)
    return f"CONCAT_WS(CHAR(31 USING utf8mb4), {parts})"


def integer_key(kinds: list[Kind]) -> bool:
    """A single integer key is its own bucket hash (its low bits): one md5 a row less on every side."""
    return len(kinds) == 1 and kinds[0] is Kind.INT


def sql_key_bucket(vendor: str, key: list[tuple[str, Kind]], buckets: int) -> str:
    if integer_key([k for _, k in key]):
        return f"({key[0][0]} & {buckets - 1})"
    return sql_bucket(vendor, sql_text(vendor, key), buckets)


def spark_key_bucket(key: list[tuple[Column, Kind]], buckets: int) -> Column:
    if integer_key([k for _, k in key]):
        return key[0][0].cast("bigint").bitwiseAND(buckets - 1)
    return spark_bucket(spark_text(key), buckets)


def arrow_key_buckets(table: pa.Table, key: list[str], buckets: int) -> np.ndarray:
    import numpy as np
    import pyarrow as pa
    if integer_key([kind_from_arrow(table.schema.field(c).type) for c in key]):
        values = table.column(key[0]).combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False)
        return (values & np.int64(buckets - 1)).astype(np.int64)
    return arrow_buckets(arrow_text(table, key), buckets)


def sql_bucket(vendor: str, key_text: str, buckets: int) -> str:
    if vendor == "postgres":
        return f"((('x' || substr(md5({key_text}), 1, 8))::bit(32)::int) & {buckets - 1})"
    return f"(CAST(CONV(SUBSTRING(MD5({key_text}), 1, 8), 16, 10) AS UNSIGNED) & {buckets - 1})"


def sql_hash(vendor: str, row_text: str, *, native: bool = False) -> str:
    """A 64-bit number (signed in PostgreSQL: sums agree modulo 2**64). ``native``: both sides are PostgreSQL,
    whose own ``hashtextextended`` (stable: hash partitioning relies on it) costs a fraction of md5."""
    if native and vendor == "postgres":
        return f"hashtextextended({row_text}, 0)"
    if vendor == "postgres":
        return f"(('x' || substr(md5({row_text}), 1, 16))::bit(64)::bigint)"
    return f"CAST(CONV(SUBSTRING(MD5({row_text}), 1, 16), 16, 10) AS UNSIGNED)"


def spark_text(columns: list[tuple[Column, Kind]]) -> Column:
    from pyspark.sql import functions as F

    parts = []
    for col, kind in columns:
        if kind is Kind.BOOL:
            text = col.cast("int").cast("string")
        elif kind is Kind.TS:
            text = F.unix_micros(col.cast("timestamp")).cast("string")
        elif kind is Kind.DATE:
            text = F.unix_date(col).cast("string")
        else:
            text = col.cast("string")
        parts.append(F.coalesce(text, F.lit(NULL_TEXT)))
    return F.concat_ws(SEPARATOR, *parts)


def spark_bucket(key_text: Column, buckets: int) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.substring(F.md5(key_text), 1, 8), 16, 10).cast("bigint").bitwiseAND(buckets - 1)


def spark_hash(row_text: Column) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.substring(F.md5(row_text), 1, 16), 16, 10).cast("decimal(20,0)")


def arrow_text(table: pa.Table, columns: list[str]) -> pa.Array:
    """The canonical row text of ``columns`` of ``table``, one string per row."""
    import pyarrow as pa
    import pyarrow.compute as pc
    parts = []
    for name in columns:
        values = table.column(name).combine_chunks() if table.num_rows else pa.array([], table.schema.field(name).type)
        parts.append(pc.fill_null(_arrow_one(values), NULL_TEXT))
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, SEPARATOR)


def _arrow_one(values: pa.Array) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc
    t = values.type
    kind = kind_from_arrow(t)
    if kind is Kind.BOOL:
        return pc.cast(pc.cast(values, pa.int8()), pa.string())
    if kind is Kind.TS:
        micros = pc.cast(values, pa.timestamp("us", tz=t.tz)) if t.unit != "us" else values
        return pc.cast(pc.cast(micros, pa.int64()), pa.string())
    if kind is Kind.DATE:
        return pc.cast(pc.cast(pc.cast(values, pa.date32()), pa.int32()), pa.string())
    try:
        return pc.cast(values, pa.string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        # No text form shared with the source's engine: the bucket then differs and is compared by value.
        return pa.array([None if v is None else repr(v) for v in values.to_pylist()], pa.string())


def md5_numbers(texts: pa.Array, *, digits: int) -> np.ndarray:
    """The first ``digits`` hex digits of each text's md5, as unsigned integers (DataFusion hashes, in Rust)."""
    import datafusion
    import numpy as np
    import pyarrow as pa
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    # One partition keeps the rows in order; the row number proves it (and restores it if an engine
    # version ever repartitions a projection).
    ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    table = pa.Table.from_arrays([pa.array(np.arange(n, dtype=np.int64)), texts], names=["i", "v"])
    ctx.register_record_batches("t", [table.to_batches(max_chunksize=1 << 16)])
    out = ctx.sql("SELECT i, md5(v) AS h FROM t").to_arrow_table()
    order = out.column("i").to_numpy()
    hexes = out.column("h").combine_chunks().cast(pa.string())
    if not np.array_equal(order, np.arange(n)):
        hexes = hexes.take(pa.array(np.argsort(order)))
    offsets = np.frombuffer(hexes.buffers()[1], dtype=np.int32)[hexes.offset : hexes.offset + n + 1]
    data = np.frombuffer(hexes.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[0] + 32 * n].reshape(n, 32)
    nibbles = _hex_digits()[data[:, :digits]].astype(np.uint64)
    out = np.zeros(n, dtype=np.uint64)
    for i in range(digits):
        out = (out << np.uint64(4)) | nibbles[:, i]
    return out


@functools.cache
def _hex_digits() -> np.ndarray:
    """Each ASCII byte's value as a hex digit (0 for any other byte)."""
    import numpy as np
    table = np.zeros(256, dtype=np.uint8)
    table[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
    return table


def arrow_buckets(key_text: pa.Array, buckets: int) -> np.ndarray:
    import numpy as np
    return (md5_numbers(key_text, digits=8) & np.uint64(buckets - 1)).astype(np.int64)


def arrow_hashes(row_text: pa.Array) -> np.ndarray:
    return md5_numbers(row_text, digits=16)


@dataclass
class Fingerprints:
    """Per bucket: rows in scope, the sum of their hashes modulo 2**64 and (source) rows newer than the HW."""

    counts: dict[int, int] = field(default_factory=dict)
    sums: dict[int, int] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=dict)

    def add(self, bucket: int, count: int, total: int, pending: int = 0) -> None:
        if count:
            self.counts[bucket] = count
            self.sums[bucket] = total & MASK64
        if pending:
            self.pending[bucket] = pending

    def same(self, other: Fingerprints, bucket: int) -> bool:
        return self.counts.get(bucket, 0) == other.counts.get(bucket, 0) and self.sums.get(bucket, 0) == other.sums.get(bucket, 0)

"""COPY in PostgreSQL's binary format, encoded from Arrow by pgpq (Rust): the server reads fixed-width
values instead of parsing text, and the client writes no CSV.

Binary COPY takes a fraction of CSV's time and of its client CPU for the usual mix of columns
(``benchmarks/pg_copy_format.py``). A binary value must have exactly its column's type, so a batch
goes in binary only when every column's pair (Arrow type, PostgreSQL type) is one this module encodes
exactly (``encoder``); any other batch keeps the CSV or row-by-row path. A PostgreSQL date or timestamp
column may hold ±infinity, staged as its type's extremes, which the binary form cannot carry: such a
column qualifies only when its row-group statistics show neither extreme.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pgpq
import pyarrow as pa
import pyarrow.compute as pc
from pgpq import encoders
from pgpq import schema as pg

from incsync.core.typemap import INFINITY
from incsync.staging.batch import StagedBatch, valued_statistics
from incsync.staging.infinity import may_hold_infinity

_INTEGERS = {"smallint": pa.int16(), "integer": pa.int32(), "bigint": pa.int64()}
_INTEGER_BUILDERS = {16: encoders.Int16EncoderBuilder, 32: encoders.Int32EncoderBuilder, 64: encoders.Int64EncoderBuilder}
_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")
Builder = Callable[[pa.Field], object]


@dataclass(frozen=True)
class BinaryForm:
    """How each staged column goes in binary: the Arrow type it is cast to and its pgpq encoder."""

    schema: pa.Schema
    encoder: pgpq.ArrowToPostgresBinaryEncoder

    def encode(self, batch: pa.RecordBatch) -> bytes:
        columns = []
        for column, field in zip(batch.columns, self.schema, strict=True):
            if isinstance(column.type, pa.BaseExtensionType):
                column = column.storage
            columns.append(column if column.type == field.type else pc.cast(column, field.type))
        return self.encoder.write_batch(pa.RecordBatch.from_arrays(columns, schema=self.schema))


def encoder(batch: StagedBatch, wanted: dict[str, str]) -> BinaryForm | None:
    """The batch's binary form when every column into its ``wanted`` PostgreSQL type is exact, else None."""
    fields, builders = [], {}
    for field in batch.schema:
        plan = _column(field, wanted[field.name])
        if plan is None or (may_hold_infinity(field) and not _no_extremes(batch, field)):
            return None
        kind, builder = plan
        out = pa.field(field.name, kind)
        fields.append(out)
        builders[field.name] = builder(out)
    schema = pa.schema(fields)
    return BinaryForm(schema, pgpq.ArrowToPostgresBinaryEncoder.new_with_encoders(schema, builders))


def _column(field: pa.Field, wanted: str) -> tuple[pa.DataType, Builder] | None:
    """(the Arrow type to cast to, its encoder builder) for a column of PostgreSQL type ``wanted``; None
    when this pair has no exact binary form here."""
    t = field.type
    if isinstance(t, pa.BaseExtensionType):  # JSON text (``arrow.json``)
        if t.extension_name != "arrow.json" or not pa.types.is_string(t.storage_type):
            return None
        t = t.storage_type
    if pa.types.is_string(t) and wanted in ("jsonb", "json"):  # a JSON document as its text
        if wanted == "jsonb":
            return t, lambda f: encoders.StringEncoderBuilder.new_with_output(f, pg.Jsonb())
        return t, encoders.StringEncoderBuilder
    if pa.types.is_boolean(t):
        return (t, encoders.BooleanEncoderBuilder) if wanted == "boolean" else None
    if pa.types.is_integer(t):
        target = _INTEGERS.get(wanted)
        if target is None or not _fits(t, target):
            return None
        return target, _INTEGER_BUILDERS[target.bit_width]
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return (pa.float32(), encoders.Float32EncoderBuilder) if wanted == "real" else None
    if pa.types.is_float64(t):
        return (t, encoders.Float64EncoderBuilder) if wanted == "double precision" else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        text = wanted == "text" or wanted.startswith(("character varying", "character("))
        builder = encoders.StringEncoderBuilder if pa.types.is_string(t) else encoders.LargeStringEncoderBuilder
        return (t, builder) if text else None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        builder = encoders.BinaryEncoderBuilder if pa.types.is_binary(t) else encoders.LargeBinaryEncoderBuilder
        return (t, builder) if wanted == "bytea" else None
    if pa.types.is_date32(t):
        return (t, encoders.Date32EncoderBuilder) if wanted == "date" else None
    if pa.types.is_time64(t) and t.unit == "us":
        plain = wanted.startswith("time") and wanted.endswith("without time zone")
        return (t, encoders.Time64MicrosecondEncoderBuilder) if plain else None
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms", "us"):
        zoned = wanted.endswith("with time zone") and not wanted.endswith("without time zone")
        if not wanted.startswith("timestamp") or zoned != (t.tz is not None):
            return None
        return pa.timestamp("us", tz=t.tz), encoders.TimestampMicrosecondEncoderBuilder
    if isinstance(t, pa.Decimal128Type):
        bounded = _NUMERIC.fullmatch(wanted)
        exact = wanted == "numeric" or (bounded is not None and int(bounded[2]) >= t.scale
                                        and int(bounded[1]) - int(bounded[2]) >= t.precision - t.scale)
        return (t, encoders.Decimal128EncoderBuilder) if exact else None
    return None


def _fits(source: pa.DataType, target: pa.DataType) -> bool:
    """Every value of the integer type ``source`` is one of the signed ``target``."""
    if pa.types.is_signed_integer(source):
        return source.bit_width <= target.bit_width
    return source.bit_width < target.bit_width


def _no_extremes(batch: StagedBatch, field: pa.Field) -> bool:
    """Whether the files' row-group statistics show the column holds neither extreme (±infinity); False
    when a row group has no statistics for it."""
    least, greatest = INFINITY["date" if pa.types.is_date(field.type) else "timestamp"]
    return all(stats is not None and stats.has_min_max and stats.min_raw != least and stats.max_raw != greatest
               for stats in valued_statistics(batch, field.name))

"""Staged values in their faithful Arrow types (decimal256, time64, exact text), or a ConversionError naming the value."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from incsync.core.typemap import METADATA_KEY, SOURCE_TYPE, SOURCE_VENDOR, ColumnPlan
from incsync.staging.errors import ConversionError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def arrow_type(name: str) -> pa.DataType:
    simple = {"string": pa.string(), "bool": pa.bool_(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
              "float32": pa.float32(), "float64": pa.float64(), "date32": pa.date32(), "time64[us]": pa.time64("us"),
              "timestamp[us]": pa.timestamp("us")}
    if name in simple:
        return simple[name]
    match = re.fullmatch(r"decimal(128|256)\((\d+),(\d+)\)", name)
    if match is None:
        raise ValueError(f"unknown Arrow type {name}")
    make = pa.decimal128 if match.group(1) == "128" else pa.decimal256
    return make(int(match.group(2)), int(match.group(3)))


def _convert_array(values: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if values.type == target:
        return values
    if pa.types.is_boolean(target) and pa.types.is_integer(values.type):
        outside = pc.sum(pc.and_(pc.is_valid(values), pc.invert(pc.is_in(values, pa.array([0, 1], values.type))))).as_py()
        if outside:
            raise pa.ArrowInvalid("a boolean holds 0 or 1 only")
    if pa.types.is_timestamp(target) and pa.types.is_string(values.type):
        # MySQL's zero date is its "no date": NULL, as its JDBC driver has always read it.
        zero = pc.starts_with(values, "0000-00-00")
        return pc.cast(pc.if_else(zero, pa.scalar(None, pa.string()), values), target)
    if pa.types.is_time(target) and pa.types.is_string(values.type):
        # Arrow parses no time of day from text: read it as a time on 1970-01-01 (out of range fails).
        stamped = pc.binary_join_element_wise(pa.scalar("1970-01-01 "), values, "")
        return pc.cast(pc.cast(stamped, pa.timestamp("us")), target)
    return pc.cast(values, target)


def convert_table(table: pa.Table, plans: dict[str, ColumnPlan]) -> pa.Table:
    """``table`` with each planned column in its Arrow form; ConversionError names the first bad value."""
    for name, plan in plans.items():
        if plan.arrow is None or name not in table.column_names:
            continue
        target = arrow_type(plan.arrow)
        index = table.column_names.index(name)
        try:
            converted = _convert_array(table[name], target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _conversion_error(table, plan, target, exc) from None
        table = table.set_column(index, pa.field(name, target, table.schema.field(index).nullable), converted)
    return table


def _conversion_error(table: pa.Table, plan: ColumnPlan, target: pa.DataType, exc: Exception) -> ConversionError:
    bad_value, bad_key = None, None
    for i, value in enumerate(table[plan.name].to_pylist()):
        try:
            _convert_array(pa.array([value], table[plan.name].type), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad_value = value
            bad_key = {k: table[k][i].as_py() for k in plan.key if k in table.column_names}
            break
    key = ", ".join(f"{k}={v!r}" for k, v in (bad_key or {}).items()) or "unknown"
    return ConversionError(
        f'model {plan.model}: column "{plan.name}" ({plan.vendor} {plan.source_type}) holds {bad_value!r} (key {key}), '
        f"which {target} cannot hold exactly ({' '.join(str(exc).split())[:160]}); nothing was published. "
        f'Set `column_types: {{"{plan.name}": {_suggestion(target)}}}` on the model to transfer it as a type that holds it.'
    )


def _suggestion(target: pa.DataType) -> str:
    return "smallint" if pa.types.is_boolean(target) else "text"


def field_metadata(plan: ColumnPlan) -> dict[bytes, bytes]:
    """What the staged Arrow field says about its source (the PostgreSQL destination keeps PostgreSQL types)."""
    return {SOURCE_TYPE: plan.source_type.encode(), SOURCE_VENDOR: plan.vendor.encode()}


def column_plans(df: DataFrame) -> dict[str, ColumnPlan]:
    """The plans a source attached to its columns (Spark column metadata); empty for sources without any."""
    return {
        f.name: ColumnPlan.from_json(f.metadata[METADATA_KEY])
        for f in df.schema.fields
        if f.metadata and METADATA_KEY in f.metadata
    }


def faithful_schema(schema: pa.Schema, plans: dict[str, ColumnPlan]) -> pa.Schema:
    """``schema`` with each planned column's Arrow type and its source type as field metadata."""
    fields = []
    for f in schema:
        plan = plans.get(f.name)
        if plan is not None:
            f = f.with_type(arrow_type(plan.arrow)) if plan.arrow else f
            f = f.with_metadata(field_metadata(plan))
        fields.append(f)
    return pa.schema(fields)

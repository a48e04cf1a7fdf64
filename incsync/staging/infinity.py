"""PostgreSQL's 'infinity' / '-infinity' in staged date and timestamp columns (``incsync.core.typemap.INFINITY``):
finding them for destinations that cannot hold them, and writing them as PostgreSQL reads them."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from incsync.core.typemap import INFINITY, SOURCE_TYPE, SOURCE_VENDOR
from incsync.staging.batch import StagedBatch
from incsync.staging.errors import ConversionError


def may_hold_infinity(field: pa.Field) -> bool:
    """A staged column read from a PostgreSQL date or timestamp: its extremes stand for ±infinity."""
    meta = field.metadata or {}
    if meta.get(SOURCE_VENDOR) != b"postgres":
        return False
    base = re.sub(r"\(\d+\)", "", meta.get(SOURCE_TYPE, b"").decode()).strip()
    if base == "date":
        return pa.types.is_date32(field.type)
    return base.startswith("timestamp") and not base.endswith("[]") and pa.types.is_timestamp(field.type)


def _extremes(field: pa.Field) -> tuple[pa.Scalar, pa.Scalar]:
    least, greatest = INFINITY["date" if pa.types.is_date(field.type) else "timestamp"]
    return pa.scalar(least, field.type), pa.scalar(greatest, field.type)


def _integers(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    return pc.cast(values, pa.int32() if pa.types.is_date(values.type) else pa.int64())


def infinities_as_text(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with each column that holds ±infinity as PostgreSQL's input text ('infinity', '-infinity', and
    every other value as Arrow prints it, which PostgreSQL reads); columns without one are left as they are."""
    columns, fields = list(batch.columns), list(batch.schema)
    for i, field in enumerate(fields):
        if not may_hold_infinity(field) or batch.num_rows == 0:
            continue
        least, greatest = (s.value for s in _extremes(field))
        ints = _integers(columns[i])
        bounds = pc.min_max(ints)
        if bounds["min"].as_py() != least and bounds["max"].as_py() != greatest:
            continue
        text = pc.cast(columns[i], pa.string())
        text = pc.if_else(pc.equal(ints, greatest), pa.scalar("infinity"), text)
        columns[i] = pc.if_else(pc.equal(ints, least), pa.scalar("-infinity"), text)
        fields[i] = field.with_type(pa.string())
    if all(f.type == g.type for f, g in zip(fields, batch.schema, strict=True)):
        return batch
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, metadata=batch.schema.metadata))


def python_rows(table: pa.Table) -> list[dict]:
    """``table.to_pylist()``, with ±infinity as the text 'infinity' / '-infinity' (Python's dates stop at year 9999)."""
    columns: dict[str, list] = {}
    for field in table.schema:
        values = table[field.name]
        if not may_hold_infinity(field) or table.num_rows == 0:
            columns[field.name] = values.to_pylist()
            continue
        least, greatest = (s.value for s in _extremes(field))
        ints = _integers(values)
        top, bottom = pc.fill_null(pc.equal(ints, greatest), False), pc.fill_null(pc.equal(ints, least), False)
        out = pc.if_else(pc.or_(top, bottom), pa.scalar(None, values.type), values).to_pylist()
        for i in pc.indices_nonzero(top).to_pylist():
            out[i] = "infinity"
        for i in pc.indices_nonzero(bottom).to_pylist():
            out[i] = "-infinity"
        columns[field.name] = out
    names = table.column_names
    return [dict(zip(names, row, strict=True)) for row in zip(*(columns[n] for n in names), strict=True)]


def refuse_infinities(batch: StagedBatch, *, model: str, recipient: str, key: list[str], destination: str, kind: str) -> None:
    """Fail before publishing when ``batch`` holds ±infinity for a destination other than PostgreSQL.
    The scan filters on the extremes, so Parquet's row-group statistics skip the data that has none."""
    fields = [f for f in batch.schema if may_hold_infinity(f)]
    if not fields or not batch.files:
        return
    where = None
    for field in fields:
        least, greatest = _extremes(field)
        hit = (ds.field(field.name) == least) | (ds.field(field.name) == greatest)
        where = hit if where is None else where | hit
    names = list(dict.fromkeys([*key, *(f.name for f in fields)]))
    found = batch.dataset().to_table(columns=names, filter=where)
    if found.num_rows == 0:
        return
    for field in fields:
        least, greatest = (s.value for s in _extremes(field))
        ints = _integers(found[field.name])
        rows = pc.indices_nonzero(pc.fill_null(pc.or_(pc.equal(ints, least), pc.equal(ints, greatest)), False))
        if len(rows) == 0:
            continue
        row = rows[0].as_py()
        value = "infinity" if ints[row].as_py() == greatest else "-infinity"
        at = ", ".join(_shown(found[k][row]) for k in key) or "?"
        source_type = (field.metadata or {}).get(SOURCE_TYPE, b"").decode()
        raise ConversionError(
            f'model {model}, recipient {recipient}: column "{field.name}" (postgres {source_type}) holds {value!r} '
            f"(key {at}), which no date or timestamp type outside PostgreSQL holds, and destination {destination} "
            f"is {kind}; nothing was published. Set `column_types: {{\"{field.name}\": text}}` on the model to transfer "
            "it as its text, or send it to a PostgreSQL destination, which keeps it."
        )


def _shown(value: pa.Scalar) -> str:
    try:
        return str(value.as_py())
    except (OverflowError, ValueError):  # a key that is itself ±infinity
        return str(value)

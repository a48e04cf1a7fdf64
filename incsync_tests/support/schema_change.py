"""The table the schema-change tests evolve (conformance suite and transfer tests): its columns and rows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from incsync_tests.support.lake import ts

BASE = pa.schema([
    ("id", pa.int64()), ("organization_id", pa.string()), ("code", pa.string()), ("qty", pa.int32()),
    ("updated_at", pa.timestamp("us", tz="UTC")),
])
BIG = 5_000_000_000  # needs bigint


def set_type(schema: pa.Schema, name: str, kind: pa.DataType) -> pa.Schema:
    return schema.set(schema.get_field_index(name), pa.field(name, kind))


def row(i: int, hour: int, *, code: Any = "c", qty: int = 1, **extra: Any) -> dict[str, Any]:
    return {"id": i, "organization_id": "org_1", "code": code, "qty": qty, "updated_at": ts(1, hour), **extra}

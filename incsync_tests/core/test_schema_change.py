"""What counts as a widening, and how drift is reported: plain values, both type systems."""

from __future__ import annotations

import pyarrow as pa
import pytest

from incsync.core.schema_change import (
    SchemaDiff,
    TypeChange,
    arrow_diff,
    arrow_type_name,
    arrow_widens,
    incompatible_error,
    pg_diff,
    pg_widens,
)

ARROW = [
    ("int32-int64", pa.int32(), pa.int64(), True),
    ("int16-int32", pa.int16(), pa.int32(), True),
    ("int8-int64", pa.int8(), pa.int64(), True),
    ("uint32-int64", pa.uint32(), pa.int64(), True),
    ("uint32-int32", pa.uint32(), pa.int32(), False),
    ("int32-uint64", pa.int32(), pa.uint64(), False),
    ("int64-int32", pa.int64(), pa.int32(), False),
    ("float-double", pa.float32(), pa.float64(), True),
    ("double-float", pa.float64(), pa.float32(), False),
    ("int32-double", pa.int32(), pa.float64(), True),
    ("int64-double-loses-digits", pa.int64(), pa.float64(), False),
    ("int32-decimal(10,0)", pa.int32(), pa.decimal128(10, 0), True),
    ("int32-decimal(10,2)-too-few-integer-digits", pa.int32(), pa.decimal128(10, 2), False),
    ("int64-decimal(19,0)", pa.int64(), pa.decimal128(19, 0), True),
    ("decimal(10,2)-(12,2)", pa.decimal128(10, 2), pa.decimal128(12, 2), True),
    ("decimal(10,2)-(12,4)", pa.decimal128(10, 2), pa.decimal128(12, 4), True),
    ("decimal(10,2)-(12,5)-loses-integer-digits", pa.decimal128(10, 2), pa.decimal128(12, 5), False),
    ("decimal(10,2)-(10,1)-loses-scale", pa.decimal128(10, 2), pa.decimal128(10, 1), False),
    ("decimal128-decimal256", pa.decimal128(38, 2), pa.decimal256(50, 2), True),
    ("timestamp-ms-us", pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC"), True),
    ("timestamp-us-ms", pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC"), False),
    ("timestamp-zone-change", pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),
    ("time32-time64", pa.time32("ms"), pa.time64("us"), True),
    ("string-int64", pa.string(), pa.int64(), False),
    ("int64-string", pa.int64(), pa.string(), False),
    ("string-large_string-is-the-same", pa.string(), pa.large_string(), False),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in ARROW], ids=[c[0] for c in ARROW])
def test_arrow_widening(old: pa.DataType, new: pa.DataType, expected: bool) -> None:
    assert arrow_widens(old, new) is expected


PG = [
    ("integer-bigint", "integer", "bigint", True),
    ("smallint-integer", "smallint", "integer", True),
    ("bigint-integer", "bigint", "integer", False),
    ("real-double", "real", "double precision", True),
    ("double-real", "double precision", "real", False),
    ("varchar10-varchar20", "character varying(10)", "character varying(20)", True),
    ("varchar20-varchar10", "character varying(20)", "character varying(10)", False),
    ("varchar10-text", "character varying(10)", "text", True),
    ("varchar10-varchar", "character varying(10)", "character varying", True),
    ("text-varchar10", "text", "character varying(10)", False),
    ("numeric(10,2)-(12,2)", "numeric(10,2)", "numeric(12,2)", True),
    ("numeric(10,2)-(12,4)", "numeric(10,2)", "numeric(12,4)", True),
    ("numeric(10,2)-(11,4)-loses-integer-digits", "numeric(10,2)", "numeric(11,4)", False),
    ("numeric(10,2)-numeric", "numeric(10,2)", "numeric", True),
    ("numeric-numeric(10,2)", "numeric", "numeric(10,2)", False),
    ("integer-numeric(10,0)", "integer", "numeric(10,0)", True),
    ("bigint-numeric(18,0)", "bigint", "numeric(18,0)", False),
    ("timestamp3-timestamp", "timestamp(3) with time zone", "timestamp with time zone", True),
    ("timestamp-timestamp3", "timestamp without time zone", "timestamp(3) without time zone", False),
    ("timestamp-zone-change", "timestamp without time zone", "timestamp with time zone", False),
    ("time0-time6", "time(0) without time zone", "time without time zone", True),
    ("text-bigint", "text", "bigint", False),
    ("integer-text", "integer", "text", False),
    ("same", "numeric(12,2)", "numeric(12,2)", False),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in PG], ids=[c[0] for c in PG])
def test_postgres_widening(old: str, new: str, expected: bool) -> None:
    assert pg_widens(old, new) is expected


def test_arrow_diff_sorts_every_kind_of_change() -> None:
    old = pa.schema([("id", pa.int64()), ("qty", pa.int32()), ("code", pa.string()), ("price", pa.decimal128(12, 2)),
                     ("legacy", pa.string()), ("n", pa.int64())])
    new = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("code", pa.int64()), ("price", pa.decimal128(12, 2)),
                     ("note", pa.large_string()), ("n", pa.int32())])
    d = arrow_diff(old, new)
    assert d == SchemaDiff(
        added=(("note", "string"),),
        dropped=("legacy",),
        widened=(TypeChange("qty", "integer", "bigint"),),
        narrowed=(TypeChange("n", "bigint", "integer"),),
        incompatible=(TypeChange("code", "string", "bigint"),),
    )
    assert d.drift() == "added note string; dropped legacy; changed qty integer→bigint, n bigint→integer, code string→bigint"
    assert d.applied() == (
        "widened qty integer→bigint; added note string; kept n bigint (holds every integer value); "
        "kept dropped column legacy (NULL in new rows)"
    )
    assert d.applied(replaced=True).endswith("; replaced code string→bigint (full refresh)")


def test_no_drift_no_metadata() -> None:
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
    other = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="+00:00"))])
    assert not arrow_diff(schema, other)
    assert arrow_diff(schema, other).metadata() == {}


def test_pg_diff_metadata_says_widened_integer_to_bigint() -> None:
    d = pg_diff({"id": "bigint", "qty": "integer", "code": "character varying(10)"},
                {"id": "bigint", "qty": "bigint", "code": "text"})
    assert d.metadata() == {
        "schema_drift": "changed qty integer→bigint, code character varying(10)→text",
        "schema_change": "widened qty integer→bigint; widened code character varying(10)→text",
    }


def test_type_names() -> None:
    assert [arrow_type_name(t) for t in (pa.int16(), pa.int32(), pa.int64(), pa.float64(), pa.decimal128(12, 2),
                                         pa.timestamp("us", tz="UTC"), pa.large_string(), pa.uint32())] == [
        "smallint", "integer", "bigint", "double", "decimal(12,2)", "timestamp(us, UTC)", "string", "unsigned integer"]


def test_incompatible_error_names_column_types_and_fix() -> None:
    error = incompatible_error("model orders, recipient acme", "acme.orders", (TypeChange("code", "text", "bigint"),),
                               model="orders", recipient="acme")
    assert str(error) == (
        "model orders, recipient acme: the source changed a column's type in a way acme.orders cannot hold in place "
        "(column code is text in acme.orders but bigint in the source); nothing was published. Fix: reload the "
        "recipient with the new type (incsync transfer orders --recipient acme --full-refresh), or cast the column "
        "back to its old type in the model's source_query."
    )

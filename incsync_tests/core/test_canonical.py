"""Verify's hashing on the Arrow side equals md5 as every database computes it, row for row and in order."""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa

from incsync.core.canonical import arrow_buckets, arrow_text, md5_numbers


def test_md5_numbers_match_hashlib_in_row_order_for_many_batches() -> None:
    texts = pa.chunked_array([[f"row{i}" for i in range(k, k + 70_000)] for k in range(0, 210_000, 70_000)]).combine_chunks()
    got = md5_numbers(texts, digits=16)
    for i in range(0, 210_000, 1_009):
        assert int(got[i]) == int(hashlib.md5(f"row{i}".encode()).hexdigest()[:16], 16)
    assert arrow_buckets(texts.slice(0, 3), 16).tolist() == [int(hashlib.md5(f"row{i}".encode()).hexdigest()[:8], 16) % 16 for i in range(3)]


def test_canonical_text_of_common_types() -> None:
    table = pa.table({
        "a_int": pa.array([7, None], pa.int64()),
        "b_num": pa.array([Decimal("-0.10"), Decimal("12.50")], pa.decimal128(12, 2)),
        "c_text": pa.array(["x", ""]),
        "d_bool": pa.array([True, False]),
        "e_ts": pa.array([datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=timezone.utc), None], pa.timestamp("us", tz="UTC")),
        "f_date": pa.array([date(1970, 1, 3), None]),
    })
    assert arrow_text(table, table.schema.names).to_pylist() == [
        "7\x1f-0.10\x1fx\x1f1\x1f1000005\x1f2", "\\N\x1f12.50\x1f\x1f0\x1f\\N\x1f\\N"]


def test_postgres_infinity_has_the_canonical_text_of_its_staged_extremes() -> None:
    """PostgreSQL's ±infinity hashes as the integers staging holds it as (``typemap.INFINITY``), so a
    source and a copy that both hold it agree; finite values keep their text."""
    from incsync.core.canonical import Kind, sql_text
    from incsync_tests.support.jdbc import pg_database

    staged = pa.table({
        "t": pa.array([2**63 - 1, -(2**63), 1_000_005, None], pa.timestamp("us", tz="UTC")),
        "d": pa.array([2**31 - 1, -(2**31), 2, None], pa.date32()),
    })
    expression = sql_text("postgres", [("t", Kind.TS), ("d", Kind.DATE)])
    with pg_database() as db:
        got = [r[0] for r in db.execute(
            f"SELECT {expression} FROM (VALUES (1, 'infinity'::timestamptz, 'infinity'::date), "
            "(2, '-infinity', '-infinity'), (3, '1970-01-01 00:00:01.000005+00', '1970-01-03'), (4, NULL, NULL)) v(n, t, d) "
            "ORDER BY n")]
    assert got == arrow_text(staged, ["t", "d"]).to_pylist() == [
        "9223372036854775807\x1f2147483647", "-9223372036854775808\x1f-2147483648", "1000005\x1f2", "\\N\x1f\\N"]

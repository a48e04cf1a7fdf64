"""MariaDB/MySQL source types arrive exactly in every destination, or the transfer fails loudly (issue 19: 2, 3, 4).

What each destination holds is the table in docs/types.md; these tests assert it.
"""

from __future__ import annotations

from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from incsync.staging.errors import ConversionError
from incsync_tests.support.destinations import MATRIX_KINDS, Target, destination_env
from incsync_tests.support.jdbc import maria_database
from incsync_tests.support.jdbc_transfer import (
    arrow_schema,
    delta_schema,
    duckdb_schema,
    iceberg_schema,
    parquet_schema,
    pg_destination_rows,
    rows_by,
    transfer,
    write_config,
)

D6530 = "123456789012345678901234567890123.123456789012345678901234567891"
U64 = 18446744073709551615

DDL = """CREATE TABLE orders (
    id INT PRIMARY KEY, organization_id VARCHAR(10) NOT NULL, updated_at TIMESTAMP(6) NOT NULL,
    d DECIMAL(65,30), d2 DECIMAL(10,2), tm TIME(6), b8 BIT(8), b1 BIT(1), b64 BIT(64), y YEAR, flag TINYINT(1),
    ub BIGINT UNSIGNED, sb TINYINT, f FLOAT, dbl DOUBLE, dt DATE, dtt DATETIME(6), j JSON, e ENUM('a', 'bb'),
    s SET('x', 'y'), bl BLOB, tx TEXT, c CHAR(3)) DEFAULT CHARSET=utf8mb4"""
INSERT = f"""SET NAMES utf8mb4; SET time_zone = '+00:00'; INSERT INTO orders VALUES
 (1, 'org_1', '2024-01-01 10:00:00', {D6530}, 12.34, '13:14:15.123456', b'10100101', b'1', b'{"1" * 64}', 2024, 1,
  {U64}, -128, 1.5, 0.1, '1850-01-01', '2024-01-01 00:00:00.000001', '{{"a": [1]}}', 'a', 'x,y', X'00ff', 'héllo 😀', 'ab'),
 (2, 'org_1', '2024-01-01 11:00:00', -0.000000000000000000000000000001, NULL, '00:00:00', b'0', b'0', b'0', 1901, 0,
  0, 127, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '', NULL),
 (3, 'org_2', '2024-01-01 12:00:00', 1, 1, '01:00:00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL);"""


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, spark) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


@pytest.fixture
def source():
    with maria_database() as db:
        db.execute(DDL)
        db.execute(INSERT)
        yield db


def test_every_mariadb_type_arrives_exactly(kind: str, source, spark, tmp_path: Path) -> None:
    config = write_config(tmp_path, source, kind)
    assert transfer(config, spark).record.rows_transferred == 2
    if kind == "postgres":
        rows, types = pg_destination_rows()
        assert types == {
            "id": "integer", "organization_id": "text", "updated_at": "timestamp with time zone", "d": "numeric(65,30)",
            "d2": "numeric(10,2)", "tm": "time without time zone", "b8": "integer", "b1": "boolean", "b64": "bigint",
            "y": "smallint", "flag": "boolean", "ub": "numeric(20,0)", "sb": "smallint", "f": "real",
            "dbl": "double precision", "dt": "date", "dtt": "timestamp without time zone", "j": "text", "e": "text",
            "s": "text", "bl": "bytea", "tx": "text", "c": "text",
        }
        decimal_form, time_form = Decimal, lambda t: t  # noqa: E731
    elif kind == "delta":
        rows = rows_by(config, "id")
        schema = delta_schema(tmp_path)
        assert (schema["d"], schema["tm"], schema["b8"], schema["y"]) == ("string", "string", "int32", "int16")
        decimal_form, time_form = str, lambda t: t.strftime("%H:%M:%S.%f")  # noqa: E731
    elif kind in ("duckdb", "iceberg"):  # DuckDB's and Iceberg's decimals stop at 38 digits: wider ones are their exact text
        rows = rows_by(config, "id")
        schema = duckdb_schema(tmp_path) if kind == "duckdb" else iceberg_schema(tmp_path)
        assert (schema["d"], schema["tm"], schema["b8"], schema["b64"]) == ("string", "time64[us]", "int32", "int64")
        decimal_form, time_form = str, lambda t: t  # noqa: E731
    elif kind == "mariadb":  # DECIMAL(65,30) and TIME(6) as the source has them
        rows = rows_by(config, "id")
        schema = arrow_schema(config)
        assert (schema["d"], schema["tm"], schema["b8"], schema["b64"]) == ("decimal256(65, 30)", "time64[us]", "int32", "int64")
        decimal_form, time_form = Decimal, lambda t: t  # noqa: E731
    else:
        rows = rows_by(config, "id")
        schema = parquet_schema(tmp_path)
        assert (schema["d"], schema["tm"], schema["b8"], schema["b64"]) == ("decimal256(65, 30)", "time64[us]", "int32", "int64")
        decimal_form, time_form = Decimal, lambda t: t  # noqa: E731
    first, second = rows
    assert (first["d"], second["d"]) == (decimal_form(D6530), decimal_form("-0.000000000000000000000000000001"))
    assert (first["tm"], second["tm"]) == (time_form(time(13, 14, 15, 123456)), time_form(time(0)))
    # BIT(n): its bits as an integer (BIT(64) all ones is -1 as a signed 64-bit integer); BIT(1) a boolean.
    assert [(r["b8"], r["b1"], r["b64"]) for r in rows] == [(0b10100101, True, -1), (0, False, 0)]
    assert [(r["y"], r["flag"], r["ub"], r["sb"]) for r in rows] == [(2024, True, U64, -128), (1901, False, 0, 127)]
    assert (first["d2"], first["f"], first["dbl"], first["dt"], first["dtt"]) == (
        Decimal("12.34"), 1.5, 0.1, date(1850, 1, 1), datetime(2024, 1, 1, 0, 0, 0, 1))
    # CHAR, ENUM and SET as stored: not padded to the column's length.
    assert [(r["j"], r["e"], r["s"], r["bl"], r["tx"], r["c"]) for r in rows] == [
        ('{"a": [1]}', "a", "x,y", b"\x00\xff", "héllo 😀", "ab"), (None, None, None, None, "", None)]


def test_tinyint1_holding_more_than_a_boolean_fails_loudly_then_column_types_reads_it(source, spark, tmp_path: Path) -> None:
    source.execute("UPDATE orders SET flag = 2 WHERE id = 2")
    config = write_config(tmp_path, source, "delta")
    with pytest.raises(ConversionError, match=r'model orders: column "flag" \(mariadb tinyint\(1\)\) holds 2 \(key id=2\), '
                                              r"which bool cannot hold exactly .* Set `column_types: \{\"flag\": smallint\}`"):
        transfer(config, spark)
    assert Target(config).state().last_transfer is None
    config = write_config(tmp_path, source, "delta", column_types={"flag": "smallint"})
    transfer(config, spark)
    assert [r["flag"] for r in rows_by(config, "id")] == [1, 2]


def test_time_outside_a_day_fails_loudly_and_text_keeps_it(source, spark, tmp_path: Path) -> None:
    source.execute("UPDATE orders SET tm = '-838:59:59' WHERE id = 2")
    config = write_config(tmp_path, source, "object_storage")
    with pytest.raises(ConversionError, match=r'column "tm" \(mariadb time\(6\)\) holds \'-838:59:59.000000\' \(key id=2\)'):
        transfer(config, spark)
    config = write_config(tmp_path, source, "object_storage", column_types={"tm": "text"})
    transfer(config, spark)
    assert [r["tm"] for r in rows_by(config, "id")] == ["13:14:15.123456", "-838:59:59.000000"]
    assert parquet_schema(tmp_path)["tm"] == "string"


def test_zero_dates_arrive_as_null_and_old_datetimes_unshifted(source, spark, tmp_path: Path) -> None:
    source.execute("SET sql_mode = ''; UPDATE orders SET dt = '0000-00-00', dtt = '0000-00-00 00:00:00' WHERE id = 2;"
                   "UPDATE orders SET dtt = '1000-01-01 00:00:00.000001' WHERE id = 1;")
    config = write_config(tmp_path, source, "delta")
    transfer(config, spark)
    assert [(r["dt"], r["dtt"]) for r in rows_by(config, "id")] == [
        (date(1850, 1, 1), datetime(1000, 1, 1, 0, 0, 0, 1)), (None, None)]


def test_a_source_query_without_catalog_still_arrives_exactly(source, spark, tmp_path: Path) -> None:
    query = "SELECT id, organization_id, updated_at, d, tm, b8, c FROM orders -- no catalog entry for a query"
    config = write_config(tmp_path, source, "object_storage", source_table=None, source_query=query)
    transfer(config, spark)
    first = rows_by(config, "id")[0]
    # Without the catalog's precision, a decimal Spark would clamp arrives as its exact text.
    assert (first["d"], first["tm"], first["b8"], first["c"]) == (D6530, time(13, 14, 15, 123456), 0b10100101, "ab")
    assert parquet_schema(tmp_path)["d"] == "string"

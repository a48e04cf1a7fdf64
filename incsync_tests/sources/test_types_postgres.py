"""PostgreSQL source types arrive exactly in every destination, or the transfer fails loudly (issue 19: 1, 2, 3, 5).

What each destination holds is the table in docs/types.md; these tests assert it.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from incsync.errors import PublishError
from incsync.staging.errors import ConversionError
from incsync_tests.support.destinations import MATRIX_KINDS, Target, destination_env
from incsync_tests.support.jdbc import pg_database
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

WIDE = "123456789012345678901234.123456789012345678901"  # >= 10^20 and 21 decimals: no Decimal(38,18) holds it
N4030 = "1234567890.123456789012345678901234567891"
REF = uuid.UUID("0b0e6f0e-6a8e-4f38-9a7c-1c2d3e4f5a6b")

DDL = """CREATE TYPE mood AS ENUM ('ok', 'sad');
CREATE TABLE orders (
    id integer PRIMARY KEY, organization_id text NOT NULL, updated_at timestamptz NOT NULL,
    n numeric, n4030 numeric(40,30), n102 numeric(10,2), tm time, tm3 time(3), tmtz timetz, iv interval,
    ip inet, cd cidr, ta text[], ia integer[], js json, jb jsonb, m money, u uuid, e mood, b bytea,
    r real, d double precision, bo boolean, dt date, tsn timestamp, vc varchar(5), ch char(3), sm smallint, bi bigint, na numeric[])"""
INSERT = f"""INSERT INTO orders VALUES
 (1, 'org_1', '2024-01-01 10:00:00+00', {WIDE}, {N4030}, 12.34, '13:14:15.123456', '23:59:59.999', '13:14:15.123456+02',
  '1 year 2 days 00:00:01.5', '10.0.0.1/8', '10.0.0.0/8', '{{a,NULL,"😀"}}', '{{}}', '{{"a": 1}}', '{{"b": [2]}}', 12.34,
  '{REF}', 'sad', '\\x00ff', 'NaN', '-Infinity', true, '1850-01-01', '2024-01-01 00:00:00.000001', 'abc', 'ab', -32768,
  9223372036854775807, '{{1.5,NULL,123456789012345678901234.5}}');
INSERT INTO orders (id, organization_id, updated_at, n, tm, d) VALUES
 (2, 'org_1', '2024-01-01 11:00:00+00', 'NaN', '00:00:00', 'Infinity'),
 (3, 'org_2', '2024-01-01 12:00:00+00', 1, '01:00:00', 1)"""


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, spark) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


@pytest.fixture
def source():
    with pg_database() as db:
        db.execute(DDL)
        db.execute(INSERT)
        yield db


def test_every_postgres_type_arrives_exactly(kind: str, source, spark, tmp_path: Path) -> None:
    config = write_config(tmp_path, source, kind)
    if kind == "mariadb":  # MariaDB has no NaN or ±Infinity: refused loudly, then read as their text
        with pytest.raises(PublishError, match=r'column "r" holds NaN \(key id=1\), which MariaDB has no value for'):
            transfer(config, spark)
        config = write_config(tmp_path, source, kind, column_types={"r": "text", "d": "text"})
    assert transfer(config, spark).record.rows_transferred == 2
    if kind == "postgres":
        rows, types = pg_destination_rows()
        # PostgreSQL -> PostgreSQL keeps the source's types; an enum becomes text, money its amount.
        assert types == {
            "id": "integer", "organization_id": "text", "updated_at": "timestamp with time zone", "n": "numeric",
            "n4030": "numeric(40,30)", "n102": "numeric(10,2)", "tm": "time without time zone",
            "tm3": "time(3) without time zone", "tmtz": "time with time zone", "iv": "interval", "ip": "inet",
            "cd": "cidr", "ta": "text[]", "ia": "integer[]", "js": "json", "jb": "jsonb", "m": "numeric(19,2)",
            "u": "uuid", "e": "text", "b": "bytea", "r": "real", "d": "double precision", "bo": "boolean", "dt": "date",
            "tsn": "timestamp without time zone", "vc": "character varying(5)", "ch": "character(3)", "sm": "smallint",
            "bi": "bigint", "na": "numeric[]",
        }
        first = rows[0]
        assert (first["tmtz"], first["iv"], first["ip"], first["cd"]) == (
            time(13, 14, 15, 123456, tzinfo=timezone(timedelta(hours=2))), timedelta(days=367, seconds=1, microseconds=500000),
            ipaddress.ip_interface("10.0.0.1/8"), ipaddress.ip_network("10.0.0.0/8"),
        )
        assert (first["ta"], first["ia"], first["js"], first["jb"], first["u"]) == (["a", None, "😀"], [], {"a": 1}, {"b": [2]}, REF)
        exact = {"n": Decimal(WIDE), "n4030": Decimal(N4030), "tm": time(13, 14, 15, 123456), "tm3": time(23, 59, 59, 999000)}
        assert rows[1]["n"].is_nan()
        assert first["na"] == [Decimal("1.5"), None, Decimal("123456789012345678901234.5")]
    else:
        rows = rows_by(config, "id")
        first = rows[0]
        text_forms = {"tmtz": "13:14:15.123456+02", "iv": "1 year 2 days 00:00:01.5", "ip": "10.0.0.1/8", "cd": "10.0.0.0/8",
                      "js": '{"a": 1}', "jb": '{"b": [2]}', "u": str(REF)}
        assert {k: first[k] for k in text_forms} == text_forms
        assert (first["ta"], first["ia"]) == (["a", None, "😀"], [])
        assert rows[1]["n"] == "NaN"
        assert first["na"] == ["1.5", None, "123456789012345678901234.5"]  # each element's exact text
        if kind == "delta":
            # Delta has no time of day and no decimal past 38 digits: their exact text.
            exact = {"n": WIDE, "n4030": N4030, "tm": "13:14:15.123456", "tm3": "23:59:59.999000"}
            schema = delta_schema(tmp_path)
            assert (schema["n"], schema["n4030"], schema["tm"], schema["n102"]) == ("string", "string", "string", "decimal128(10, 2)")
        elif kind in ("duckdb", "iceberg"):  # DuckDB's and Iceberg's decimals stop at 38 digits: wider ones are their exact text
            exact = {"n": WIDE, "n4030": N4030, "tm": time(13, 14, 15, 123456), "tm3": time(23, 59, 59, 999000)}
            schema = duckdb_schema(tmp_path) if kind == "duckdb" else iceberg_schema(tmp_path)
            assert (schema["n"], schema["n4030"], schema["tm"], schema["n102"]) == ("string", "string", "time64[us]", "decimal128(10, 2)")
        elif kind == "mariadb":  # numeric(40,30) fits DECIMAL(65,30); unconstrained numeric is its exact text
            exact = {"n": WIDE, "n4030": Decimal(N4030), "tm": time(13, 14, 15, 123456), "tm3": time(23, 59, 59, 999000)}
            schema = arrow_schema(config)
            assert (schema["n"], schema["n4030"], schema["tm"], schema["n102"]) == (
                "string", "decimal256(40, 30)", "time64[us]", "decimal128(10, 2)")
        else:
            exact = {"n": WIDE, "n4030": Decimal(N4030), "tm": time(13, 14, 15, 123456), "tm3": time(23, 59, 59, 999000)}
            schema = parquet_schema(tmp_path)
            assert (schema["n"], schema["n4030"], schema["tm"]) == ("string", "decimal256(40, 30)", "time64[us]")
    assert {k: first[k] for k in exact} == exact
    assert (first["n102"], first["m"], first["e"], first["b"], first["bo"], first["dt"]) == (
        Decimal("12.34"), Decimal("12.34"), "sad", b"\x00\xff", True, date(1850, 1, 1))
    if kind == "mariadb":
        assert (first["r"], first["d"], rows[1]["d"]) == ("NaN", "-Infinity", "Infinity")
    else:
        assert math.isnan(first["r"]) and first["d"] == -math.inf and rows[1]["d"] == math.inf
    assert (first["tsn"], first["vc"], first["ch"], first["sm"], first["bi"]) == (
        datetime(2024, 1, 1, 0, 0, 0, 1), "abc", "ab ", -32768, 9223372036854775807)
    assert rows[1]["tm"] in (time(0), "00:00:00.000000")


def test_unconstrained_numeric_of_a_source_query_is_exact_text(source, spark, tmp_path: Path) -> None:
    query = "SELECT id, organization_id, updated_at, n * 10 AS n10, n102 FROM orders"
    config = write_config(tmp_path, source, "object_storage", source_table=None, source_query=query)
    transfer(config, spark)
    rows = rows_by(config, "id")
    assert [r["n10"] for r in rows] == ["1234567890123456789012341.234567890123456789010", "NaN"]
    assert rows[0]["n102"] == Decimal("12.34")
    assert parquet_schema(tmp_path)["n10"] == "string"


def test_column_types_override_the_faithful_default(source, spark, tmp_path: Path, monkeypatch) -> None:
    config = write_config(tmp_path, source, "object_storage", column_types={"n102": "text", "tm": "text", "sm": "integer"},
                          source_query=None)
    transfer(config, spark)
    first = rows_by(config, "id")[0]
    assert (first["n102"], first["tm"], first["sm"]) == ("12.34", "13:14:15.123456", -32768)
    schema = parquet_schema(tmp_path)
    assert (schema["n102"], schema["tm"], schema["sm"]) == ("string", "string", "int32")


def test_a_value_the_chosen_type_cannot_hold_fails_before_publishing(source, spark, tmp_path: Path) -> None:
    config = write_config(tmp_path, source, "delta", column_types={"n": "decimal(30,21)"})
    with pytest.raises(ConversionError) as caught:
        transfer(config, spark)
    message = str(caught.value)
    assert message.startswith(
        f'model orders: column "n" (postgres numeric) holds \'{WIDE}\' (key id=1), which decimal128(30, 21) cannot hold exactly'
    )
    assert message.endswith('nothing was published. Set `column_types: {"n": text}` on the model to transfer it as a type '
                            "that holds it.")
    assert Target(config).state().last_transfer is None
    assert not (tmp_path / "out/acme/orders").exists()


def test_column_types_are_checked_by_the_config_and_against_the_source(source, spark, tmp_path: Path) -> None:
    import yaml

    from incsync.config.load import load_config
    from incsync.errors import ConfigError
    from incsync.sources.registry import check_sources

    config = write_config(tmp_path, source, "delta", column_types={"n102": "money", "": "text", "updated_at": "text"})
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    text = str(caught.value)
    assert 'models[0].column_types.n102: "money" is not a type incsync reads as; use text, boolean' in text
    assert "models[0].column_types: column '' is empty; name a column" in text
    assert 'models[0].column_types: "updated_at" is the last_modified_column, which is read as a timestamp; remove it' in text

    doc = yaml.safe_load(config.read_text())
    doc["models"][0]["columns"] = ["id", "organization_id", "updated_at"]
    doc["models"][0]["column_types"] = {"n": "text"}
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r'models\[0\]\.column_types: column "n" is not in columns \[id, organization_id, updated_at\]'):
        load_config(config)

    config = write_config(tmp_path, source, "delta", column_types={"nope": "text", "n": "decimal(60,21)"})
    problems = check_sources(load_config(config), spark)
    assert problems == [
        "models.orders (recipient acme): model orders: column_types names ['nope'], which the source does not have "
        "(it has: id, organization_id, updated_at, n, n4030, n102, tm, tm3, tmtz, iv, ip, cd, ta, ia, js, jb, m, u, e, b, r, d, "
        "bo, dt, tsn, vc, ch, sm, bi, na); fix `column_types`"
    ]


def test_a_delta_table_written_with_the_old_lossy_type_is_rewritten_with_the_exact_one(source, spark, tmp_path: Path) -> None:
    """A table of acme's holding TIME the old lossy way (a timestamp on 1970-01-01) and no transfer record:
    its data and log disagree, so the transfer re-syncs it from the start as a full refresh with the
    exact form (Delta has no time type: exact text), never merging the two forms."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from incsync.config.load import load_config
    from incsync.destinations.ownership import OWNER_PROPERTY, owner_of

    config = write_config(tmp_path, source, "delta", columns=["id", "organization_id", "updated_at", "tm"])
    loaded = load_config(config)
    stamp = owner_of(loaded.models[0], loaded.recipients[0]).to_json()  # acme's own table, from an earlier version
    old = pa.table({"id": pa.array([1], pa.int32()), "tm": pa.array([datetime(1970, 1, 1, 13, 14, 15, 123000)], pa.timestamp("us"))})
    path = str(tmp_path / "out/acme/orders")
    DeltaTable.create(path, schema=old.schema, configuration={OWNER_PROPERTY: stamp}, raise_if_key_not_exists=False)
    write_deltalake(path, old, mode="append")

    outcome = transfer(config, spark)

    assert outcome.record.transfer_type == "FULL_REFRESH" and outcome.full_refresh_reason.startswith("destination_reset")
    assert pa.schema(DeltaTable(path).schema().to_arrow()).field("tm").type == pa.string()


def test_infinite_timestamps_fail_naming_the_columns_and_text_keeps_them(spark, tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute("CREATE TABLE orders (id int PRIMARY KEY, organization_id text, updated_at timestamptz, "
                   "ends_at timestamptz, born date, note text)")
        db.execute("INSERT INTO orders VALUES (1, 'org_1', '2024-01-01 10:00+00', 'infinity', '-infinity', 'x')")
        config = write_config(tmp_path, db, "object_storage")
        with pytest.raises(ConversionError) as caught:
            transfer(config, spark)
        assert str(caught.value) == (
            'model orders, recipient acme: column "ends_at" (postgres timestamp with time zone) holds \'infinity\' '
            "(key 1), which no date or timestamp type outside PostgreSQL holds, and destination acme_dest is "
            'object_storage; nothing was published. Set `column_types: {"ends_at": text}` on the model to transfer it '
            "as its text, or send it to a PostgreSQL destination, which keeps it."
        )
        assert Target(config).state().last_transfer is None
        config = write_config(tmp_path, db, "object_storage", column_types={"ends_at": "text", "born": "text"})
        transfer(config, spark)
        assert [(r["ends_at"], r["born"]) for r in rows_by(config, "id")] == [("infinity", "-infinity")]


@pytest.mark.parametrize("kind", ["postgres", "object_storage"])
def test_postgres_bit_strings_arrive_as_their_bits(kind: str, spark, tmp_path: Path, monkeypatch) -> None:
    with pg_database() as db, destination_env(kind, monkeypatch):
        db.execute("CREATE TABLE orders (id int PRIMARY KEY, organization_id text, updated_at timestamptz, b1 bit(1), "
                   "b8 bit(8), vb varbit)")
        db.execute("INSERT INTO orders VALUES (1, 'org_1', '2024-01-01 10:00+00', b'1', b'10100101', b'101')")
        config = write_config(tmp_path, db, kind)
        transfer(config, spark)
        if kind == "postgres":
            rows, types = pg_destination_rows()
            assert (types["b1"], types["b8"], types["vb"]) == ("boolean", "bit(8)", "bit varying")
        else:
            rows = rows_by(config, "id")
        assert [(r["b1"], r["b8"], r["vb"]) for r in rows] == [(True, "10100101", "101")]

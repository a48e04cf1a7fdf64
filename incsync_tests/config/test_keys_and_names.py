"""Keys of any width, names as the database spells them, and source queries as pasted (issue 19: 6, 7, 8)."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync.config.load import parse_config
from incsync.core.sql_text import pasted_query, split_qualified
from incsync.errors import ConfigError, ValidationError
from incsync.staging.spark import stage
from incsync.transfer.validate import validate_and_count
from incsync_tests.support.destinations import MATRIX_KINDS, destination_env
from incsync_tests.support.jdbc import maria_database, pg_database
from incsync_tests.support.jdbc_transfer import rows_by, transfer, write_config
from incsync_tests.support.lake import ts

KEY3 = ["org_id", "order_id", "line_no"]


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, spark) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


def _batch(tmp_path: Path, rows: list[dict[str, Any]]):
    schema = pa.schema([("org_id", pa.string()), ("order_id", pa.int64()), ("line_no", pa.int32()),
                        ("updated_at", pa.timestamp("us", tz="UTC"))])
    return stage(pa.Table.from_pylist(rows, schema=schema), tmp_path / "stage")


def _model(**extra: Any):
    doc = {
        "sources": [{"name": "db", "vendor": "postgres", "jdbc_url": "jdbc:postgresql://h/db"}],
        "models": [{"model_name": "lines", "source": "db", "source_table": "lines", "primary_key": KEY3,
                    "last_modified_column": "updated_at", "organization_column": "org_id",
                    "min_start_time_epoch": 0, **extra}],
    }
    return parse_config(doc).models[0]


def test_three_column_key_validates_and_names_offending_keys(tmp_path: Path) -> None:
    model = _model()
    good = [{"org_id": "o", "order_id": 1, "line_no": n, "updated_at": ts(1)} for n in (1, 2, 3)]
    facts = validate_and_count(_batch(tmp_path / "a", good), model=model, recipient_id="acme", delta_threshold=None)
    assert (facts.rows, facts.delta_rows, facts.max_last_modified) == (3, 3, ts(1))

    null_key = [*good, {"org_id": "o", "order_id": None, "line_no": 9, "updated_at": ts(1)}]
    with pytest.raises(ValidationError, match=r"1 row\(s\) have a NULL primary key \(org_id, order_id, line_no\) "
                                              r"\(e\.g\. \('o', None, 9\)\)"):
        validate_and_count(_batch(tmp_path / "b", null_key), model=model, recipient_id="acme", delta_threshold=None)

    dupes = [*good, good[1]]
    with pytest.raises(ValidationError, match=r"1 primary key value\(s\) .* occur more than once in the batch: \('o', 1, 2\)"):
        validate_and_count(_batch(tmp_path / "c", dupes), model=model, recipient_id="acme", delta_threshold=None)


PG_LINES8 = """CREATE TABLE orders (
    organization_id text, order_id bigint, line_no smallint, ref uuid, day date, at timestamptz, code varchar(8),
    part integer, qty integer, updated_at timestamptz NOT NULL,
    PRIMARY KEY (organization_id, order_id, line_no, ref, day, at, code, part))"""
KEY8 = ["organization_id", "order_id", "line_no", "ref", "day", "at", "code", "part"]


@pytest.mark.parametrize("width", [3, 8])
def test_wide_primary_keys_upsert_in_every_destination(kind: str, width: int, spark, tmp_path: Path) -> None:
    key = KEY8[:width]
    ref = uuid.UUID(int=5)
    with pg_database() as db:
        db.execute(PG_LINES8)
        insert = "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        rows = [("org_1", 7, n, ref, date(1899, 12, 31), ts(1), "A", 1, n * 10, ts(1, n)) for n in (1, 2, 3)]
        rows.append(("org_2", 7, 1, ref, date(2024, 1, 1), ts(1), "A", 1, 5, ts(1, 4)))
        for row in rows:
            db.execute(insert, row)
        config = write_config(tmp_path, db, kind, primary_key=key)
        assert transfer(config, spark).record.rows_transferred == 3
        db.execute("UPDATE orders SET qty = 99, updated_at = %s WHERE line_no = 2", [ts(1, 20)])
        outcome = transfer(config, spark)
        assert (outcome.record.rows_transferred, outcome.record.delta_rows_transferred) == (3, 1)
        got = [(r["line_no"], r["qty"], r["updated_at"]) for r in rows_by(config, "line_no")]
        assert got == [(1, 10, ts(1, 1)), (2, 99, ts(1, 20)), (3, 30, ts(1, 3))]


@pytest.mark.parametrize(
    ("pasted", "expected"),
    [
        ("SELECT * FROM orders -- all of them", "SELECT * FROM orders"),
        ("SELECT * FROM orders;", "SELECT * FROM orders"),
        ("SELECT * FROM orders;  -- done\n\n", "SELECT * FROM orders"),
        ("SELECT '--;' AS a, 1 /* x */ FROM t /* tail */ ;;", "SELECT '--;' AS a, 1 /* x */ FROM t"),
        ("SELECT $$ -- $$ AS a", "SELECT $$ -- $$ AS a"),
        ("WITH x AS (SELECT 1 AS a) SELECT * FROM x -- own WITH", "WITH x AS (SELECT 1 AS a) SELECT * FROM x"),
    ],
)
def test_pasted_query_loses_only_trailing_comments_and_semicolons(pasted: str, expected: str) -> None:
    assert pasted_query(pasted) == expected


def test_mysql_hash_comment_and_backslash_escapes_only_where_they_exist() -> None:
    assert pasted_query("SELECT 1 # tail", vendor="mariadb") == "SELECT 1"
    assert pasted_query("SELECT 1 # tail", vendor="postgres") == "SELECT 1 # tail"
    assert pasted_query("SELECT 'C:\\' AS p; -- c", vendor="postgres") == "SELECT 'C:\\' AS p"
    assert pasted_query("SELECT E'it\\'s;' AS p;", vendor="postgres") == "SELECT E'it\\'s;' AS p"
    assert pasted_query("SELECT 'it\\'s;' AS p; # c", vendor="mariadb") == "SELECT 'it\\'s;' AS p"


PASTED = [
    "SELECT * FROM orders -- pasted from the editor",
    "SELECT * FROM orders;\n-- done",
    "WITH recent AS (SELECT * FROM orders) SELECT * FROM recent; # trailing",
]


@pytest.mark.parametrize("vendor", ["postgres", "mariadb"])
def test_source_query_runs_as_pasted(vendor: str, spark, tmp_path: Path, monkeypatch) -> None:
    with (pg_database() if vendor == "postgres" else maria_database()) as db:
        lm = "timestamptz" if vendor == "postgres" else "TIMESTAMP(6)"
        db.execute(f"CREATE TABLE orders (id bigint PRIMARY KEY, organization_id varchar(10), updated_at {lm} NOT NULL)")
        zone = "SET time_zone = '+00:00'; " if vendor == "mariadb" else "SET TIME ZONE 'UTC'; "
        db.execute(zone + "INSERT INTO orders VALUES (1, 'org_1', '2024-01-01 10:00:00'), (2, 'org_2', '2024-01-01 11:00:00')")
        for i, query in enumerate(PASTED):
            if vendor == "postgres":
                query = query.replace("# trailing", "-- trailing")
            root = tmp_path / str(i)
            root.mkdir()
            config = write_config(root, db, "delta", source_table=None, source_query=query)
            assert transfer(config, spark).record.rows_transferred == 1, query
            assert [r["id"] for r in rows_by(config, "id")] == [1]


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ('public."Order"', ["public", "Order"]),
        ('"Order"', ["Order"]),
        ("public.Order", ["public", "Order"]),
        ("`shop`.`Order Lines`", ["shop", "Order Lines"]),
        ('"we""ird"."select"', ['we"ird', "select"]),
        ("Zürich_orders", ["Zürich_orders"]),
    ],
)
def test_table_names_are_read_as_the_database_spells_them(name: str, parts: list[str]) -> None:
    assert split_qualified(name) == parts
    assert _model(source_table=name).source_table == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("orders; DROP TABLE x", "must be `table` or `schema.table`"),
        ('"unterminated', "must be `table` or `schema.table`"),
        ("a.b.c", "must be `table` or `schema.table`"),
        ("a..b", "must be `table` or `schema.table`"),
        ('"nul\x00"', "must be `table` or `schema.table`"),
        ("order lines", "must be `table` or `schema.table`; quote a part that is not a plain word"),
    ],
)
def test_nonsense_table_names_are_refused_with_the_fix(name: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _model(source_table=name)
    assert f'models[0].source_table: "{name}" {problem}' in str(caught.value)


def test_column_names_may_be_mixed_case_reserved_or_spaced_but_not_control_characters() -> None:
    model = _model(columns=["org_id", "order_id", "line_no", "updated_at", "Select", "line total", "organizationId"])
    assert "line total" in (model.columns or [])
    with pytest.raises(ConfigError) as caught:
        _model(columns=["org_id", "order_id", "line_no", "updated_at", "bad\nname", ""])
    text = str(caught.value)
    assert "models[0]: column 'bad\\nname' holds a control character" in text
    assert "models[0]: column '' is empty; name a column" in text


PG_PRISMA = """CREATE TABLE public."Order" (
    "id" text PRIMARY KEY, "organizationId" text NOT NULL, "select" integer, "line total" numeric(10,2),
    "updatedAt" timestamptz(3) NOT NULL)"""


@pytest.mark.parametrize("table", ['public."Order"', '"Order"', "public.Order"])
def test_prisma_style_postgres_table_into_every_destination(kind: str, table: str, spark, tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(PG_PRISMA)
        db.execute("""INSERT INTO public."Order" VALUES ('a', 'org_1', 1, 2.50, '2024-01-01 10:00:00.123+00'),
                      ('b', 'org_2', 2, 3.00, '2024-01-01 11:00:00+00')""")
        db.execute('CREATE TABLE public."order" (id text)')  # the folded name must never be read instead
        config = write_config(tmp_path, db, kind, source_table=table, organization_column="organizationId",
                              last_modified_column="updatedAt")
        assert transfer(config, spark).record.rows_transferred == 1
        [row] = rows_by(config, "id")
        assert (row["id"], row["organizationId"], row["select"], str(row["line total"])) == ("a", "org_1", 1, "2.50")
        assert row["updatedAt"] == datetime.fromisoformat("2024-01-01T10:00:00.123+00:00")


def test_mixed_case_and_spaced_names_in_mariadb(spark, tmp_path: Path, monkeypatch) -> None:
    with maria_database() as db:
        db.execute("""CREATE TABLE `Order Lines` (`Id` BIGINT PRIMARY KEY, `organizationId` VARCHAR(10),
                      `group` INT, `updatedAt` TIMESTAMP(6) NOT NULL)""")
        db.execute("SET time_zone = '+00:00'; INSERT INTO `Order Lines` VALUES (1, 'org_1', 7, '2024-01-01 10:00:00.000001'), (2, 'org_2', 8, '2024-01-01 10:00:00')")
        config = write_config(tmp_path, db, "delta", source_table=f"`{db.name}`.`Order Lines`", primary_key=["Id"],
                              organization_column="organizationId", last_modified_column="updatedAt",
                              columns=["Id", "organizationId", "group", "updatedAt"])
        assert transfer(config, spark).record.rows_transferred == 1
        assert rows_by(config, "Id") == [
            {"Id": 1, "organizationId": "org_1", "group": 7, "updatedAt": ts(1, 10, 0, 0, 1)}
        ]


@pytest.mark.parametrize(
    ("arrow_type", "fix"),
    [
        (pa.decimal256(50, 10), "Spark reads decimals of up to 38 digits"),
        (pa.time64("us"), 'set `spark: {"spark.sql.timeType.enabled": "true"}` in the config'),
        (pa.timestamp("ns", tz="UTC"), "write it as timestamp[us]"),
    ],
)
def test_lake_parquet_types_spark_cannot_read_fail_naming_column_and_fix(arrow_type, fix, spark, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from incsync.core.bounds import Bounds
    from incsync.errors import SchemaError
    from incsync.sources.lake import LakeSource

    folder = tmp_path / "src" / "orders"
    folder.mkdir(parents=True)
    table = pa.table({"id": pa.array([1], pa.int64()), "organization_id": ["org_1"],
                      "updated_at": pa.array([ts(1)], pa.timestamp("us", tz="UTC")), "odd": pa.array([None], arrow_type)})
    pq.write_table(table, folder / "part-0.parquet")
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": str(tmp_path / "src")}],
        "models": [{"model_name": "orders", "source": "lake", "source_table": "orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id", "min_start_time_epoch": 0}],
        "recipients": [{"id": "acme", "id_in_provider_system": "org_1", "destination": "x"}],
    }
    config = parse_config({**doc, "destinations": [{"name": "x", "kind": "delta", "path": str(tmp_path / "out")}]})
    source = LakeSource(config.sources[0])
    bounds = Bounds(lower=ts(1), upper=ts(2), lookback_seconds=0, reason="test")
    with pytest.raises(SchemaError) as caught:
        source.read(spark, model=config.models[0], recipient=config.recipients[0], bounds=bounds)
    assert str(caught.value).startswith(
        f'model orders: column "odd" of lake table {folder} has Parquet type {arrow_type}, which Spark cannot read; {fix}')


@pytest.mark.parametrize("how", ["source_table", "source_query"])
def test_mixed_case_tenant_schema_is_not_folded(how: str, spark, tmp_path: Path) -> None:
    with pg_database() as db:
        for schema, status in (('"TenantA"', "mine"), ("tenanta", "folded")):
            db.execute(f"CREATE SCHEMA {schema}")
            db.execute(f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, status text, updated_at timestamptz NOT NULL)")
            db.execute(f"INSERT INTO {schema}.orders VALUES (1, '{status}', '2024-01-01 10:00+00')")
        model = {"source_table": "orders"} if how == "source_table" else {
            "source_table": None, "source_query": "SELECT * FROM orders -- the recipient's schema"}
        config = write_config(tmp_path, db, "delta", tenant="TenantA", tenancy="schema", organization_column=None, **model)
        assert transfer(config, spark).record.rows_transferred == 1
        assert [r["status"] for r in rows_by(config, "id")] == ["mine"]

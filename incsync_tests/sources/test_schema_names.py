"""Schema tenancy with the schema names real applications give their tenants (issue 31): a dash, a space
and upper case, on real PostgreSQL and MariaDB — transferred (backfill, then incremental), the safe
horizon asked, and `incsync verify` passing."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest

from incsync.cli.main import run_command
from incsync.config.load import load_config, parse_config
from incsync.config.tags import MODE_TAG
from incsync.core.bounds import Bounds
from incsync.errors import ConfigError
from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.definitions import build_definitions
from incsync.sources.jdbc.types import catalog_sql
from incsync.sources.registry import build_source
from incsync_tests.sources.test_jdbc_sources import MARIA_ORDERS, PG_ORDERS, maria_insert, pg_insert
from incsync_tests.support.jdbc import MariaDatabase, PgDatabase, jdbc_config, maria_database, mariadb_cli, pg_database
from incsync_tests.support.lake import delta_rows, ts

MODEL = dg.AssetKey(["db", "orders"])
RECIPIENTS = ["globex", "acme", "bigco"]
COLUMNS = ["id", "status", "amount", "updated_at"]


def _names(vendor: str) -> dict[str, str]:
    """Recipient -> schema. MariaDB's schemas are server-wide databases, so a suffix keeps tests apart."""
    suffix = "" if vendor == "postgres" else f"_{uuid.uuid4().hex[:8]}"
    return {"globex": f"globex-eu{suffix}", "acme": f"Acme Corp{suffix}", "bigco": f"BigCo{suffix}"}


def _table(vendor: str, schema: str) -> str:
    return f'"{schema}".orders' if vendor == "postgres" else f"`{schema}`.orders"


def _create(db: PgDatabase | MariaDatabase, schema: str, *, scale: int = 2) -> None:
    """``orders`` in ``schema``, its amount a decimal(12 + scale - 2, scale) (the decoy's differs)."""
    if isinstance(db, PgDatabase):
        db.execute(f'CREATE SCHEMA "{schema}"')
        db.execute(PG_ORDERS.format(table=_table("postgres", schema)).replace("numeric(12,2)", f"numeric({10 + scale},{scale})"))
    else:
        mariadb_cli(f"CREATE DATABASE `{schema}`")
        db.execute(MARIA_ORDERS.format(table=_table("mariadb", schema), lm="TIMESTAMP(6)").replace(
            "DECIMAL(12,2)", f"DECIMAL({10 + scale},{scale})"))


def _insert(db: PgDatabase | MariaDatabase, schema: str, rows: list[tuple]) -> None:
    """``rows``: (id, status, amount text, updated_at)."""
    if isinstance(db, PgDatabase):
        pg_insert(db, _table("postgres", schema), [(i, None, s, Decimal(a), "{}", True, None, u) for i, s, a, u in rows])
    else:
        maria_insert(db, _table("mariadb", schema), [(i, None, s, a, "{}", True, u) for i, s, a, u in rows])


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, first: str, last: str, mode: str) -> dg.ExecuteInProcessResult:
    """One run over every recipient and the windows ``first``..``last``, as a schedule or backfill launches it."""
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, asset_selection=[MODEL], tags={
        ASSET_PARTITION_RANGE_START_TAG: str(partition_key(first, RECIPIENTS[0])),
        ASSET_PARTITION_RANGE_END_TAG: str(partition_key(last, RECIPIENTS[-1])), MODE_TAG: mode,
    })


def _horizons(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """Recipient -> the ``horizon`` its transfer recorded (on each commit's record: its last window)."""
    out = {}
    for event in result.get_asset_materialization_events():
        recipient = event.partition.split("|")[0]  # type: ignore[union-attr]
        if "horizon" in event.materialization.metadata:
            out[recipient] = event.materialization.metadata["horizon"].value
    return out


def _copy(root: Path, recipient: str) -> list[tuple]:
    """(id, status, amount as text, updated_at): the text shows the scale, so the decoy's type would show."""
    return [(r["id"], r["status"], str(r["amount"]), r["updated_at"]) for r in delta_rows(root / "out" / recipient / "orders")]


# MariaDB's case (~20 s) waits for make test-long; its names are checked in make test by the tests below.
@pytest.mark.parametrize("vendor", ["postgres", pytest.param("mariadb", marks=pytest.mark.slow)])
def test_dash_space_and_upper_case_schemas_transfer_and_verify(
    vendor: str, spark, dagster_instance, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = _names(vendor)
    decoy = names["bigco"].lower()  # differs from BigCo only in case: a folding read would take its rows
    database = pg_database() if vendor == "postgres" else maria_database()
    with database as db:
        try:
            for n, recipient in enumerate(RECIPIENTS):
                _create(db, names[recipient])
                base = 100 * n
                _insert(db, names[recipient], [(base + 1, "new", "1.50", ts(1, 1)), (base + 2, "new", "-2.25", ts(2, 1))])
            _create(db, decoy, scale=6)
            _insert(db, decoy, [(901, "decoy", "9.99", ts(1, 2))])
            recipients = [{"id": r, "id_in_provider_system": names[r], "destination": f"{r}_delta"} for r in RECIPIENTS]
            config = jdbc_config(tmp_path, db, recipients=recipients, model={
                "organization_column": None, "tenancy": "schema", "columns": COLUMNS})
            assert run_command(["validate", "-c", str(config)]) == 0
            defs = build_definitions(config)
            dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, RECIPIENTS)

            backfill = _run(defs, dagster_instance, "2024-01-01", "2024-01-02", "backfill")
            assert _horizons(backfill) == dict.fromkeys(RECIPIENTS, "transactions")
            for n, recipient in enumerate(RECIPIENTS):
                base = 100 * n
                assert _copy(tmp_path, recipient) == [
                    (base + 1, "new", "1.50", ts(1, 1)), (base + 2, "new", "-2.25", ts(2, 1))]

            for n, recipient in enumerate(RECIPIENTS):
                base = 100 * n
                _insert(db, names[recipient], [(base + 1, "paid", "1.50", ts(2, 5)), (base + 3, "new", "3.00", ts(2, 6))])
            _insert(db, decoy, [(902, "decoy", "9.99", ts(2, 7))])
            incremental = _run(defs, dagster_instance, "2024-01-02", "2024-01-02", "incremental")
            assert _horizons(incremental) == dict.fromkeys(RECIPIENTS, "transactions")
            for n, recipient in enumerate(RECIPIENTS):
                base = 100 * n
                assert _copy(tmp_path, recipient) == [
                    (base + 1, "paid", "1.50", ts(2, 5)), (base + 2, "new", "-2.25", ts(2, 1)), (base + 3, "new", "3.00", ts(2, 6))]

            capsys.readouterr()
            assert run_command(["verify", "orders", "-c", str(config), "--json"]) == 0
            reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert [(r["recipient"], r["passed"], r["total_rows_compared"], r["total_rows_missing"], r["total_rows_orphaned"])
                    for r in reports] == [(r, True, 3, 0, 0) for r in RECIPIENTS]
        finally:
            if vendor == "mariadb":
                for schema in [*names.values(), decoy]:
                    mariadb_cli(f"DROP DATABASE IF EXISTS `{schema}`")


@pytest.mark.parametrize("vendor", ["postgres", "mariadb"])
def test_a_source_query_reads_the_recipient_schema_and_validate_connects(vendor: str, spark, tmp_path: Path) -> None:
    """Unqualified tables of a source_query resolve in the recipient's schema (PostgreSQL's search_path,
    MariaDB's URL database), for Spark's reads, the row count and `validate --connect`."""
    names = _names(vendor)
    database = pg_database() if vendor == "postgres" else maria_database()
    with database as db:
        try:
            for n, recipient in enumerate(RECIPIENTS):
                _create(db, names[recipient])
                _insert(db, names[recipient], [(100 * n + 1, "new", "1.50", ts(1, 1)), (100 * n + 2, "void", "2.00", ts(1, 2))])
            recipients = [{"id": r, "id_in_provider_system": names[r], "destination": f"{r}_delta"} for r in RECIPIENTS]
            path = jdbc_config(tmp_path, db, recipients=recipients, model={
                "organization_column": None, "tenancy": "schema", "source_table": None,
                "source_query": "SELECT id, status, amount, updated_at FROM orders WHERE status <> 'void'"})
            assert run_command(["validate", "--connect", "-c", str(path)]) == 0
            config = load_config(path)
            source, model = build_source(config.source("db")), config.model("orders")
            bounds = Bounds(lower=ts(1), upper=ts(2), lookback_seconds=0, reason="test")
            for n, recipient in enumerate(config.recipients):
                rows = source.read(spark, model=model, recipient=recipient, bounds=bounds).collect()
                assert [(r["id"], r["status"], str(r["amount"])) for r in rows] == [(100 * n + 1, "new", "1.50")]
                if vendor == "postgres":  # through psycopg, with the schema as its search_path
                    assert source.count_rows(model=model, recipient=recipient, bounds=bounds, cap=10) == 1
        finally:
            if vendor == "mariadb":
                for schema in names.values():
                    mariadb_cli(f"DROP DATABASE IF EXISTS `{schema}`")


def test_a_mariadb_database_named_with_a_question_mark_reads_through_source_table(spark, tmp_path: Path) -> None:
    """The driver ends the URL's database at the first ``?``, so such a database stays out of the URL; a
    source_table read names it in the query, and the horizon and verify's queries need no database."""
    schema = f"who?what&x=1/{uuid.uuid4().hex[:8]}"
    with maria_database() as db:
        try:
            _create(db, schema)
            _insert(db, schema, [(1, "new", "1.50", ts(1, 1))])
            recipients = [{"id": "acme", "id_in_provider_system": schema, "destination": "acme_delta"}]
            path = jdbc_config(tmp_path, db, recipients=recipients, model={
                "organization_column": None, "tenancy": "schema", "columns": COLUMNS})
            config = load_config(path)
            source, model, recipient = build_source(config.source("db")), config.model("orders"), config.recipients[0]
            rows = source.read(spark, model=model, recipient=recipient, bounds=Bounds(
                lower=ts(1), upper=ts(2), lookback_seconds=0, reason="test")).collect()
            assert [(r["id"], r["status"], str(r["amount"])) for r in rows] == [(1, "new", "1.50")]
            assert source.horizon(lambda: spark, model=model, recipient=recipient).mode == "transactions"
        finally:
            mariadb_cli(f"DROP DATABASE IF EXISTS `{schema}`")


def test_mariadb_catalog_answers_for_the_exact_database_only() -> None:
    """information_schema compares names case-insensitively; under lower_case_table_names=0 `BigCo` and
    `bigco` are two databases, and the column types must come from the one read."""
    suffix = uuid.uuid4().hex[:8]
    exact, other = f"BigCo_{suffix}", f"bigco_{suffix}"
    with maria_database() as db:
        if db.execute("SELECT @@lower_case_table_names") != [["0"]]:
            pytest.skip("the server folds database names (lower_case_table_names > 0): they are one database")
        try:
            _create(db, exact)
            _create(db, other, scale=6)
            rows = db.execute(catalog_sql("mariadb", f"`{exact}`.`orders`", [exact, "orders"]))
            assert sorted(name for name, _ in rows) == sorted(
                ["id", "organization_id", "status", "amount", "payload", "flag", "updated_at"])  # each once
            assert dict(map(tuple, rows))["amount"] == "decimal(12,2)"
        finally:
            for schema in (exact, other):
                mariadb_cli(f"DROP DATABASE IF EXISTS `{schema}`")


def _config(vendor: str, schema: str, **model: object):
    return {
        "sources": [{"name": "db", "vendor": vendor, "jdbc_url": "jdbc:postgresql://h/db" if vendor == "postgres"
                     else "jdbc:mariadb://h/db"}],
        "destinations": [{"name": "d", "kind": "delta", "path": "/tmp/never-written"}],
        "models": [{"model_name": "orders", "source": "db", "source_table": "orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "tenancy": "schema", "min_start_time_epoch": 0, **model}],
        "recipients": [{"id": "acme", "id_in_provider_system": schema, "destination": "d"}],
    }


@pytest.mark.parametrize("vendor", ["postgres", "mariadb", "mysql"])
@pytest.mark.parametrize("schema", ["globex-eu", "Acme Corp", "BigCo", "o'brien", 'say "hi"', "a.b", "a?b&c=d/e", "ünï", " lead"])
def test_any_schema_name_the_database_holds_is_accepted(vendor: str, schema: str) -> None:
    config = parse_config(_config(vendor, schema))
    assert build_source(config.sources[0]).schema_of(config.models[0], config.recipients[0]) == schema


@pytest.mark.parametrize(
    ("vendor", "schema", "model", "problem"),
    [
        ("postgres", "", {}, 'schema "" of schema-tenanted model orders (source db, postgres) is empty; '
         "write the schema's name as the database spells it"),
        ("mariadb", "a\x00b", {}, "holds a NUL character, which no database name can; remove it"),
        ("postgres", "é" * 32, {}, "is 64 bytes long; PostgreSQL keeps the first 63 bytes of a name, so use a shorter schema name"),
        ("mariadb", "x" * 65, {}, "is 65 characters long; a MySQL/MariaDB database name has at most 64"),
        ("mariadb", "trailing ", {}, "ends with a space, which a MySQL/MariaDB database name cannot; remove it"),
        ("mysql", "emoji \U0001f600", {}, "holds a character beyond the Basic Multilingual Plane (an emoji?)"),
        ("mariadb", "a?b", {"source_table": None, "source_query": "SELECT * FROM orders"},
         "holds a ?, and a source_query reads the recipient's database as the JDBC URL's, which the driver ends at the "
         "first ?; rename the database or read it with source_table"),
    ],
)
def test_a_schema_name_the_database_cannot_hold_is_refused_naming_recipient_and_fix(
    vendor: str, schema: str, model: dict, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(vendor, schema, **model))
    assert "recipients[0].id_in_provider_system: schema " in str(caught.value)
    assert problem in str(caught.value)
    # The same rule at read time, for recipients that reach a source without `validate` (recipients_from).
    config = parse_config(_config(vendor, "fine", **model))
    recipient = config.recipients[0].model_copy(update={"id_in_provider_system": schema})
    with pytest.raises(ConfigError) as at_read:
        build_source(config.sources[0]).schema_of(config.models[0], recipient)
    assert "acme.id_in_provider_system: schema " in str(at_read.value) and problem in str(at_read.value)

"""JDBC sources against the real PostgreSQL and MariaDB servers: pushdown, tenancy, types, errors, secrets."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.core.bounds import Bounds
from incsync.core.vendor_sql import mysql_literal, postgres_literal
from incsync.destinations.registry import build_destination
from incsync.errors import SourceError
from incsync.orchestration.definitions import build_definitions
from incsync.sources.registry import build_source, check_sources
from incsync_tests.support.jdbc import MariaDatabase, PgDatabase, jdbc_config, maria_database, mariadb_cli, pg_database
from incsync_tests.support.lake import delta_rows, latest_metadata, materialize_partition, ts

MODEL_KEY = ("db", "orders")
INCREMENTAL = {"incsync/mode": "incremental"}

PG_ORDERS = """CREATE TABLE {table} (
    id bigint PRIMARY KEY, organization_id text, status text, amount numeric(12,2), payload jsonb,
    flag boolean, ref uuid, updated_at timestamptz(6) NOT NULL)"""
MARIA_ORDERS = """CREATE TABLE {table} (
    id BIGINT PRIMARY KEY, organization_id VARCHAR(100), status TEXT, amount DECIMAL(12,2), payload JSON,
    flag BOOLEAN, updated_at {lm} NOT NULL)"""


def pg_insert(db: PgDatabase, table: str, rows: list[tuple]) -> None:
    for row in rows:
        db.execute(
            f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
            "status = EXCLUDED.status, updated_at = EXCLUDED.updated_at",
            row,
        )


def maria_insert(db: MariaDatabase, table: str, rows: list[tuple], database: str | None = None) -> None:
    values = ", ".join(
        "({}, {}, '{}', {}, '{}', {}, '{}')".format(
            r[0], "NULL" if r[1] is None else mysql_literal(r[1]), r[2], r[3], r[4], "TRUE" if r[5] else "FALSE",
            r[6].strftime("%Y-%m-%d %H:%M:%S.%f"),
        )
        for r in rows
    )
    db.execute(
        f"SET time_zone = '+00:00'; INSERT INTO {table} VALUES {values} "
        "ON DUPLICATE KEY UPDATE status = VALUES(status), updated_at = VALUES(updated_at);",
        database=database,
    )


def transfer_hw(config_path: Path, recipient: str = "acme") -> datetime | None:
    config = load_config(config_path)
    r = config.recipient(recipient)
    return build_destination(config.destination(r.destination)).read_state(model=config.model("orders"), recipient=r).high_watermark


def run(defs, dagster_instance, window: str, *, tags: dict[str, str] | None = None, recipient: str = "acme"):
    return materialize_partition(defs, dagster_instance, window=window, recipient=recipient, model_key=MODEL_KEY, tags=tags)


def test_unreachable_server_fails_under_ci_and_skips_otherwise(monkeypatch):
    from incsync_tests.support.jdbc import require_server

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"Nowhere is not reachable on 127.0.0.1:9 \(CI=true"):
        require_server("Nowhere", 9)
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="Nowhere is not reachable"):
        require_server("Nowhere", 9)


def test_driver_jars_and_packages_reach_spark_at_start(tmp_path):
    from incsync.spark.session import JDBC_DRIVER_JARS

    config = tmp_path / "incsync.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "db", "vendor": "postgres", "jdbc_url": "jdbc:postgresql://127.0.0.1:5432/x",
                     "driver_jar": "/opt/drivers/pg.jar", "driver_package": "org.postgresql:postgresql:42.7.4"}],
    }))
    spark_conf = build_definitions(config).resources["spark"].spark_config
    assert spark_conf["spark.jars"].split(",") == [*(j for j in JDBC_DRIVER_JARS if Path(j).exists()), "/opt/drivers/pg.jar"]
    assert spark_conf["spark.jars.packages"] == "org.postgresql:postgresql:42.7.4"


def test_literals_cannot_break_out():
    assert postgres_literal("o'rg\\x") == "E'o''rg\\\\x'"
    assert mysql_literal("a'b") == "CONVERT(X'612762' USING utf8mb4)"


def test_postgres_column_tenancy_backfill_then_incremental(spark, dagster_instance, tmp_path):
    with pg_database() as db:
        db.execute(PG_ORDERS.format(table="orders"))
        ref = str(uuid.UUID(int=7))
        pg_insert(db, "orders", [
            (1, "org_1", "new", Decimal("12.34"), '{"a": [1, 2]}', True, ref, ts(1, 10, 0, 0, 1)),
            (2, "org_1", "new", Decimal("-0.01"), '{"b": null}', False, None, ts(1, 23, 59, 59, 999_999)),
            (3, "org_1", "new", None, None, None, None, ts(2)),
            (4, "org_2", "new", Decimal("1.00"), "{}", True, None, ts(1, 12)),
        ])
        config = jdbc_config(tmp_path, db)
        defs = build_definitions(config)

        run(defs, dagster_instance, "2024-01-01")
        rows = delta_rows(tmp_path / "out/acme/orders")
        assert rows == [
            {"id": 1, "organization_id": "org_1", "status": "new", "amount": Decimal("12.34"), "payload": '{"a": [1, 2]}',
             "flag": True, "ref": ref, "updated_at": ts(1, 10, 0, 0, 1)},
            {"id": 2, "organization_id": "org_1", "status": "new", "amount": Decimal("-0.01"), "payload": '{"b": null}',
             "flag": False, "ref": None, "updated_at": ts(1, 23, 59, 59, 999_999)},
        ]
        assert transfer_hw(config) == ts(1, 23, 59, 59, 999_999)
        assert latest_metadata(dagster_instance, MODEL_KEY)["rows_transferred"] == 2

        run(defs, dagster_instance, "2024-01-02")
        assert [r["id"] for r in delta_rows(tmp_path / "out/acme/orders")] == [1, 2, 3]
        assert transfer_hw(config) == ts(2)

        pg_insert(db, "orders", [(1, "org_1", "paid", Decimal("12.34"), "{}", True, ref, ts(2, 8, 0, 0, 500_000))])
        run(defs, dagster_instance, "2024-01-02", tags=INCREMENTAL)
        meta = latest_metadata(dagster_instance, MODEL_KEY)
        # L = floor(HW) - 30 s = 2024-01-01 23:59:30: rows 2 (overlap), 3 (at the HW, not newer) and 1 (changed).
        assert (meta["rows_transferred"], meta["delta_rows_transferred"]) == (3, 1)
        rows = delta_rows(tmp_path / "out/acme/orders")
        assert [(r["id"], r["status"], r["updated_at"]) for r in rows] == [
            (1, "paid", ts(2, 8, 0, 0, 500_000)), (2, "new", ts(1, 23, 59, 59, 999_999)), (3, "new", ts(2)),
        ]
        assert transfer_hw(config) == ts(2, 8, 0, 0, 500_000)


def test_mariadb_column_tenancy_exact_tenant_and_microseconds(spark, dagster_instance, tmp_path):
    with maria_database() as db:
        db.execute(MARIA_ORDERS.format(table="orders", lm="TIMESTAMP(6)"))
        maria_insert(db, "orders", [
            (1, "org_1", "new", "12.34", '{"a":[1,2]}', True, ts(1, 0, 0, 0, 0)),
            (2, "org_1", "new", "-0.01", '{"b":null}', False, ts(1, 23, 59, 59, 999_999)),
            (3, "org_1", "new", "0.00", "{}", False, ts(2)),
            (4, "ORG_1", "new", "1.00", "{}", True, ts(1, 12)),   # equal under the case-insensitive collation
            (5, "org_1 ", "new", "1.00", "{}", True, ts(1, 12)),  # equal under PAD SPACE
            (6, "org_2", "new", "1.00", "{}", True, ts(1, 12)),
        ])
        config = jdbc_config(tmp_path, db)
        defs = build_definitions(config)

        run(defs, dagster_instance, "2024-01-01")
        rows = delta_rows(tmp_path / "out/acme/orders")
        assert rows == [
            {"id": 1, "organization_id": "org_1", "status": "new", "amount": Decimal("12.34"), "payload": '{"a":[1,2]}',
             "flag": True, "updated_at": ts(1)},
            {"id": 2, "organization_id": "org_1", "status": "new", "amount": Decimal("-0.01"), "payload": '{"b":null}',
             "flag": False, "updated_at": ts(1, 23, 59, 59, 999_999)},
        ]
        assert transfer_hw(config) == ts(1, 23, 59, 59, 999_999)

        run(defs, dagster_instance, "2024-01-02")
        maria_insert(db, "orders", [(2, "org_1", "paid", "-0.01", "{}", False, ts(2, 0, 0, 3, 1))])
        run(defs, dagster_instance, "2024-01-02", tags=INCREMENTAL)
        meta = latest_metadata(dagster_instance, MODEL_KEY)
        # HW 2024-01-02 00:00:00, lookback 5 s: rows 3 (at the HW) and 2 (changed).
        assert (meta["rows_transferred"], meta["delta_rows_transferred"], meta["lookback_seconds"]) == (2, 1, 5)
        assert [(r["id"], r["status"], r["updated_at"]) for r in delta_rows(tmp_path / "out/acme/orders")] == [
            (1, "new", ts(1)), (2, "paid", ts(2, 0, 0, 3, 1)), (3, "new", ts(2)),
        ]


def test_postgres_schema_tenancy_with_source_query(spark, dagster_instance, tmp_path):
    with pg_database() as db:
        for schema, offset in (("tenant_a", 0), ("tenant_b", 100)):
            db.execute(f"CREATE SCHEMA {schema}")
            db.execute(PG_ORDERS.format(table=f"{schema}.orders"))
            pg_insert(db, f"{schema}.orders", [
                (offset + 1, None, "new", Decimal("1.00"), "{}", True, None, ts(1, 1)),
                (offset + 2, None, "void", Decimal("1.00"), "{}", True, None, ts(1, 2)),
            ])
        recipients = [
            {"id": "acme", "id_in_provider_system": "tenant_a", "destination": "acme_delta"},
            {"id": "globex", "id_in_provider_system": "tenant_b", "destination": "globex_delta"},
        ]
        model = {
            "source_table": None, "organization_column": None, "tenancy": "schema",
            "source_query": "SELECT id, status, updated_at FROM orders WHERE status <> 'void';",
        }
        config = jdbc_config(tmp_path, db, model=model, recipients=recipients)
        defs = build_definitions(config)
        run(defs, dagster_instance, "2024-01-01")
        run(defs, dagster_instance, "2024-01-01", recipient="globex")
        assert delta_rows(tmp_path / "out/acme/orders") == [{"id": 1, "status": "new", "updated_at": ts(1, 1)}]
        assert delta_rows(tmp_path / "out/globex/orders") == [{"id": 101, "status": "new", "updated_at": ts(1, 1)}]

        pg_insert(db, "tenant_a.orders", [(3, None, "new", Decimal("2.00"), "{}", False, None, ts(1, 3))])
        run(defs, dagster_instance, "2024-01-01", tags=INCREMENTAL)
        assert [r["id"] for r in delta_rows(tmp_path / "out/acme/orders")] == [1, 3]
        assert latest_metadata(dagster_instance, MODEL_KEY)["delta_rows_transferred"] == 1
        assert [r["id"] for r in delta_rows(tmp_path / "out/globex/orders")] == [101]


def test_mariadb_schema_tenancy_datetime_in_declared_zone(spark, dagster_instance, tmp_path):
    with maria_database() as db:
        tenant = f"{db.name}_tenant"
        mariadb_cli(f"CREATE DATABASE `{tenant}`")
        try:
            db.execute(MARIA_ORDERS.format(table="orders", lm="DATETIME(6)"), database=tenant)
            # Wall clocks in Europe/Berlin (UTC+1 in January).
            maria_insert(db, "orders", [
                (1, None, "new", "1.00", "{}", True, datetime(2024, 1, 1, 0, 30, 0, 1)),      # 2023-12-31 23:30 UTC: out
                (2, None, "new", "1.00", "{}", True, datetime(2024, 1, 1, 13, 0, 0)),          # 12:00 UTC
                (3, None, "new", "1.00", "{}", True, datetime(2024, 1, 2, 0, 59, 59, 999_999)),  # 23:59:59.999999 UTC
                (4, None, "new", "1.00", "{}", True, datetime(2024, 1, 2, 1, 0, 0)),            # 2024-01-02 00:00 UTC
            ], database=tenant)
            recipients = [{"id": "acme", "id_in_provider_system": tenant, "destination": "acme_delta"}]
            model = {
                "organization_column": None, "tenancy": "schema", "last_modified_timezone": "Europe/Berlin",
                "columns": ["id", "status", "updated_at"],
            }
            config = jdbc_config(tmp_path, db, model=model, recipients=recipients)
            defs = build_definitions(config)
            run(defs, dagster_instance, "2024-01-01")
            assert delta_rows(tmp_path / "out/acme/orders") == [
                {"id": 2, "status": "new", "updated_at": ts(1, 12)},
                {"id": 3, "status": "new", "updated_at": ts(1, 23, 59, 59, 999_999)},
            ]
            run(defs, dagster_instance, "2024-01-02", tags=INCREMENTAL)
            assert [r["id"] for r in delta_rows(tmp_path / "out/acme/orders")] == [2, 3, 4]
            assert transfer_hw(config) == ts(2)
        finally:
            mariadb_cli(f"DROP DATABASE IF EXISTS `{tenant}`")


INJECTIONS = [
    "o'rg; DROP TABLE orders; --",
    "x' OR '1'='1",
    "back\\' OR 1=1 -- ",
    "q\\\\'; SELECT 1; --",
    "plain",
]


@pytest.mark.parametrize("vendor", ["postgres", "mariadb"])
def test_tenant_value_with_sql_reads_only_that_tenant(spark, tmp_path, vendor):
    database = pg_database() if vendor == "postgres" else maria_database()
    with database as db:
        rows = [(i + 1, tenant, "new", "1.00", "{}", True, ts(1, i + 1)) for i, tenant in enumerate(INJECTIONS)]
        if vendor == "postgres":
            db.execute(PG_ORDERS.format(table="orders"))
            pg_insert(db, "orders", [(*r[:4], r[4], r[5], None, r[6]) for r in rows])
        else:
            db.execute(MARIA_ORDERS.format(table="orders", lm="TIMESTAMP(6)"))
            maria_insert(db, "orders", rows)
        config = load_config(jdbc_config(tmp_path, db, model={"columns": ["id", "organization_id", "updated_at"]}))
        source, model = build_source(config.source("db")), config.model("orders")
        bounds = Bounds(lower=ts(1), upper=ts(2), lookback_seconds=0, reason="test")
        for i, tenant in enumerate(INJECTIONS):
            recipient = config.recipients[0].model_copy(update={"id_in_provider_system": tenant})
            got = [tuple(r) for r in source.read(spark, model=model, recipient=recipient, bounds=bounds).collect()]
            assert [(g[0], g[1]) for g in got] == [(i + 1, tenant)], tenant
        count = db.execute("SELECT count(*) FROM orders")
        assert str(count[0][0]) == str(len(INJECTIONS))


def test_partitioned_read_pushes_the_predicate_and_hides_the_password(spark, tmp_path, monkeypatch):
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("DB_PASSWORD", secret)  # trust auth accepts it; it must still never show
    with pg_database() as db:
        db.execute(PG_ORDERS.format(table="orders"))
        db.execute(
            "INSERT INTO orders (id, organization_id, status, updated_at) "
            "SELECT g, CASE WHEN g % 3 = 0 THEN 'org_2' ELSE 'org_1' END, 'new', "
            "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, 3000) g"
        )
        source_cfg = {"password_env": "DB_PASSWORD", "max_concurrent_queries_per_transfer": 3}
        config = load_config(jdbc_config(tmp_path, db, source=source_cfg, model={"columns": ["id", "organization_id", "updated_at"]}))
        source, model, recipient = build_source(config.source("db")), config.model("orders"), config.recipients[0]
        df = source.read(spark, model=model, recipient=recipient, bounds=Bounds(lower=ts(1), upper=ts(2), lookback_seconds=0, reason="t"))
        assert df.rdd.getNumPartitions() == 3
        window = Bounds(lower=ts(1), upper=ts(2), lookback_seconds=0, reason="t")
        # With the transfer's row count in hand: a small read is one query (no MIN/MAX), a large one split.
        assert source.read(spark, model=model, recipient=recipient, bounds=window, rows_hint=2000).rdd.getNumPartitions() == 1
        assert source.read(spark, model=model, recipient=recipient, bounds=window, rows_hint=50_001).rdd.getNumPartitions() == 3
        ids = sorted(r["id"] for r in df.collect())
        assert ids == [g for g in range(1, 3001) if g % 3 != 0]
        plan = df._jdf.queryExecution().toString()
        assert "\"organization_id\" = E'org_1'" in plan and "\"updated_at\" >= TIMESTAMPTZ '2024-01-01 00:00:00.000000+00:00'" in plan
        assert secret not in plan
        assert all(secret not in str(v) for _, v in spark.sparkContext.getConf().getAll())
        assert secret not in str(dict(spark.conf.getAll))

        # A row without last-modified is extracted (validation then names it), whatever the bounds.
        db.execute("ALTER TABLE orders ALTER updated_at DROP NOT NULL")
        db.execute("INSERT INTO orders (id, organization_id, updated_at) VALUES (5000, 'org_1', NULL), (5001, 'org_2', NULL)")
        late = Bounds(lower=ts(20), upper=ts(21), lookback_seconds=0, reason="t")
        assert [tuple(r) for r in source.read(spark, model=model, recipient=recipient, bounds=late).collect()] == [(5000, "org_1", None)]


def _failure_text(result) -> str:
    failures = result.get_step_failure_events()
    assert failures, "the transfer was expected to fail"
    error = failures[0].step_failure_data.error
    texts = []
    while error is not None:
        texts.append(error.message)
        error = error.cause
    return "\n".join(texts)


def test_wrong_password_is_one_clear_error_without_the_secret(spark, dagster_instance, tmp_path, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    secret = "wr0ng-" + uuid.uuid4().hex
    user = f"incsync_u_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("DB_PASSWORD", secret)
    with maria_database() as db:
        mariadb_cli(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'right-one'; CREATE USER '{user}'@'localhost' IDENTIFIED BY 'right-one';")
        try:
            db.execute(MARIA_ORDERS.format(table="orders", lm="TIMESTAMP(6)"))
            config = jdbc_config(tmp_path, db, source={"user": user, "password_env": "DB_PASSWORD"})
            defs = build_definitions(config)
            result = materialize_partition(
                defs, dagster_instance, window="2024-01-01", recipient="acme", model_key=MODEL_KEY, raise_on_error=False
            )
            assert not result.success
            text = _failure_text(result)
            assert "SourceError: source db: model orders, recipient acme: " in text
            assert f"check `user` ({user}) and the password in the variable named by `password_env` (DB_PASSWORD)" in text
            assert "Access denied" in text
            logged = [repr(e) for e in dagster_instance.all_logs(result.run_id)]
            captured = capfd.readouterr()
            for line in [*logged, *caplog.messages, captured.out, captured.err, text]:
                assert secret not in line
        finally:
            mariadb_cli(f"DROP USER IF EXISTS '{user}'@'%'; DROP USER IF EXISTS '{user}'@'localhost';")


def test_check_sources_names_unknown_role_host_and_missing_table(spark, tmp_path, monkeypatch):
    secret = "pw-" + uuid.uuid4().hex
    monkeypatch.setenv("DB_PASSWORD", secret)
    with pg_database() as db:
        db.execute(PG_ORDERS.format(table="orders"))
        ok = load_config(jdbc_config(tmp_path, db))
        assert check_sources(ok, spark) == []

        role = load_config(jdbc_config(tmp_path, db, source={"user": "no_such_role", "password_env": "DB_PASSWORD"}))
        [problem] = check_sources(role, spark)
        assert problem.startswith("models.orders (recipient acme): source db: model orders, recipient acme: ")
        assert 'role "no_such_role" does not exist' in problem and "check `user` (no_such_role)" in problem
        assert secret not in problem

        host = load_config(jdbc_config(
            tmp_path, db, source={"jdbc_url": "jdbc:postgresql://no-such-host.invalid:5432/x", "password_env": "DB_PASSWORD"}
        ))
        [problem] = check_sources(host, spark)
        assert "UnknownHostException" in problem
        assert "check the host and port in `jdbc_url` (jdbc:postgresql://no-such-host.invalid:5432/x)" in problem
        assert secret not in problem

        table = load_config(jdbc_config(tmp_path, db, model={"source_table": "public.nope"}))
        [problem] = check_sources(table, spark)
        assert 'relation "public.nope" does not exist' in problem and "check the model's source_table" in problem
        # No recipient yet: the shared table is still checked.
        [problem] = check_sources(table.model_copy(update={"recipients": []}), spark)
        assert problem.startswith("models.orders (recipient check): ") and 'relation "public.nope" does not exist' in problem


def test_missing_driver_names_the_package(spark, tmp_path):
    with pg_database() as db:
        config = load_config(jdbc_config(tmp_path, db, source={"driver_jar": str(tmp_path / "missing.jar")}))
        with pytest.raises(SourceError, match=r"driver_jar .*missing\.jar does not exist; install libpostgresql-jdbc-java"):
            build_source(config.source("db")).check(spark, model=config.model("orders"), recipient=config.recipients[0])


def test_check_warns_when_the_source_user_can_write(spark, tmp_path, caplog):
    with pg_database() as db:
        db.execute(PG_ORDERS.format(table="orders"))
        reader = f"incsync_ro_{uuid.uuid4().hex[:8]}"
        db.execute(f"CREATE ROLE {reader} LOGIN; GRANT SELECT ON orders TO {reader}")
        try:
            with caplog.at_level(logging.WARNING, logger="incsync.sources.jdbc.source"):
                assert check_sources(load_config(jdbc_config(tmp_path, db)), spark) == []
                assert [r.getMessage() for r in caplog.records] == [
                    f"source db: user {db.user} can write to orders; incsync only reads, so grant it SELECT only"
                ]
                caplog.clear()
                assert check_sources(load_config(jdbc_config(tmp_path, db, source={"user": reader})), spark) == []
                # No write warning; the only one names the grant the safe horizon lacks (test_horizon_sources.py).
                [record] = caplog.records
                assert record.name == "incsync.sources.jdbc.horizon" and f"GRANT pg_read_all_stats TO {reader}" in record.getMessage()
        finally:
            db.execute(f"REVOKE ALL ON orders FROM {reader}; DROP ROLE {reader}")


def test_validate_connect_reaches_the_database(spark, tmp_path, capsys):
    from incsync.cli.main import main

    with maria_database() as db:
        db.execute(MARIA_ORDERS.format(table="orders", lm="TIMESTAMP(6)"))
        good = jdbc_config(tmp_path, db)
        (tmp_path / "out").mkdir()
        assert main(["validate", "--connect", "-c", str(good)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "every source and destination answered"

        bad = jdbc_config(tmp_path, db, model={"source_table": "nope"})
        assert main(["validate", "--connect", "-c", str(bad)]) == 1
        [line] = [x for x in capsys.readouterr().err.splitlines() if x.strip() and not x.startswith("Dagster's and Spark's")]
        assert line.startswith(f"error: {bad}:")  # at the model's line in the file
        assert "models.orders (recipient acme): source db: model orders, recipient acme: " in line
        assert f"Table '{db.name}.nope' doesn't exist" in line and "check the model's source_table" in line

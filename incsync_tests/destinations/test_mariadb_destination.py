"""MariaDB destination, what is its own beyond the conformance suite: the column types it creates
(docs/types.md), keys MariaDB's default collations would merge, values it has no form for, what a
recipient built through a full refresh, the password's variable, and `validate` comparing servers."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync.errors import ConfigError, PublishError
from incsync_tests.arrow_transfer import run
from incsync_tests.destination_support import Target, destination_env, destination_spec, mariadb_admin
from incsync_tests.destinations.conformance.test_schema import BASE, TYPED, TYPED_ROWS, _row
from incsync_tests.support import lake_config, order, ts, write_table

SOURCE = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2), status="paid"), order(3, "org_2", ts(1, 3))]
KEYED = pa.schema([("code", pa.string()), ("organization_id", pa.string()), ("status", pa.string()),
                   ("updated_at", pa.timestamp("us", tz="UTC"))])


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch):
    with destination_env("mariadb", monkeypatch):
        yield


def _configure(root: Path, rows: list[dict], schema: pa.Schema | None = None, **model: Any) -> Path:
    write_table(root / "src", "orders", rows, **({"schema": schema} if schema is not None else {}))
    return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                       destinations=[destination_spec("mariadb")], model={"columns": None, "lookback_seconds": 0, **model})


def _sql(target: Target, statement: str, params: object = None) -> list[tuple]:
    from incsync.destinations.mariadb.connect import connect, rows

    with connect(target.destination.config) as conn:
        found = rows(conn, statement.format(db=f"`{target.destination.database}`"), params)
        conn.commit()
        return found


def _column_types(target: Target) -> dict[str, str]:
    return {c: t for c, t in _sql(target, "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE "
                                          "TABLE_SCHEMA = %s AND TABLE_NAME = 'orders' ORDER BY ORDINAL_POSITION",
                                  [target.destination.database])}


def test_the_table_takes_mariadbs_own_types(env, tmp_path: Path) -> None:
    config = _configure(tmp_path, TYPED_ROWS, TYPED)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    assert _column_types(target) == {
        "id": "bigint(20)", "organization_id": "longtext", "updated_at": "datetime(6)", "i16": "smallint(6)",
        "i32": "int(11)", "i64": "bigint(20)", "f64": "double", "flag": "tinyint(1)", "d38": "decimal(38,0)",
        "d38_10": "decimal(38,10)", "d12_2": "decimal(12,2)", "text": "longtext", "bytes": "longblob", "day": "date",
        "at": "datetime(6)",
    }
    collations = _sql(target, "SELECT DISTINCT COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                              "AND TABLE_NAME = 'orders' AND COLLATION_NAME IS NOT NULL", [target.destination.database])
    assert collations == [("utf8mb4_nopad_bin",)]
    # A zoned timestamp holds its UTC wall clock: what a recipient's SQL reads.
    assert _sql(target, "SELECT CAST(`at` AS CHAR) FROM {db}.orders WHERE id = 1") == [("1970-01-01 00:00:00.000001",)]


def test_keys_that_differ_in_case_or_trailing_spaces_stay_apart(env, tmp_path: Path) -> None:
    """utf8mb4_general_ci (the server's default) would merge acme/ACME, and every PAD SPACE collation acme/'acme '."""
    codes = ["acme", "ACME", "acme ", "Acme  ", "ａｃｍｅ"]
    rows = [{"code": c, "organization_id": "org_1", "status": f"s{i}", "updated_at": ts(1, 1 + i)} for i, c in enumerate(codes)]
    config = _configure(tmp_path, rows, KEYED, primary_key=["code"])
    target = Target(config)
    run(config, "2024-01-01", scheduled=False)
    assert sorted((r["code"], r["status"]) for r in target.rows()) == sorted((c, f"s{i}") for i, c in enumerate(codes))

    rows[1] = {**rows[1], "status": "changed", "updated_at": ts(1, 20)}  # only ACME changes
    write_table(tmp_path / "src", "orders", rows, schema=KEYED)
    outcome = run(config, "2024-01-01", scheduled=False)
    assert outcome.destination_metadata["mariadb_rows_written"] == 1
    assert sorted((r["code"], r["status"]) for r in target.rows()) == sorted(
        (c, "changed" if c == "ACME" else f"s{i}") for i, c in enumerate(codes))
    assert run(config, "2024-01-01", scheduled=False).destination_metadata["mariadb_rows_written"] == 0  # a replay writes nothing


def test_a_decimal_past_65_30_is_its_exact_text(env, tmp_path: Path) -> None:
    schema = BASE.append(pa.field("tiny", pa.decimal256(40, 35)))
    value = Decimal("-12345." + "0" * 34 + "1")
    config = _configure(tmp_path, [_row(1, 1, tiny=value)], schema)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    assert _column_types(target)["tiny"] == "longtext"
    assert [r["tiny"] for r in target.rows()] == ["-12345." + "0" * 34 + "1"]


def test_a_value_mariadb_cannot_hold_fails_naming_the_column(env, tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = (target.rows(), target.state())

    schema = BASE.append(pa.field("ratio", pa.float64()))
    write_table(tmp_path / "src", "orders", [_row(1, 5, ratio=float("nan"))], schema=schema)
    with pytest.raises(PublishError) as info:
        run(config, "2024-01-01", scheduled=False)
    assert str(info.value) == (
        'model orders, recipient acme: column "ratio" holds NaN (key id=1), which MariaDB has no value for; nothing was '
        "published. Fix: map it to NULL or a number in the model's source_query, or read the column as text "
        "(column_types: {ratio: text}).")

    keyed = _configure(tmp_path / "keyed", [{"code": "x" * 769, "organization_id": "org_1", "status": "a",
                                             "updated_at": ts(1, 1)}], KEYED, primary_key=["code"])
    with pytest.raises(PublishError) as info:
        run(keyed, "2024-01-01", scheduled=False)
    assert str(info.value) == (  # a key column holds 768 characters (InnoDB's 3072-byte key in utf8mb4)
        "model orders, recipient acme: a staged value does not fit its MariaDB column (Data truncated for column 'code' "
        "at row 1); nothing was published. Fix: cast or shorten the value in the model's source_query (a text key column "
        "holds at most 768 characters, fewer in a key of several columns: docs/types.md).")
    assert (target.rows(), target.state()) == before


def test_a_recipients_view_grant_and_own_column_survive_a_full_refresh(env, tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    user = f"incsync_bi_{uuid.uuid4().hex[:8]}"
    admin = mariadb_admin()
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'localhost'")
            cur.execute(f"GRANT SELECT ON `{target.destination.database}`.`orders` TO '{user}'@'localhost'")
        _sql(target, "ALTER TABLE {db}.orders ADD COLUMN my_note TEXT")
        _sql(target, "UPDATE {db}.orders SET my_note = CONCAT('note ', id)")
        _sql(target, "CREATE VIEW {db}.paid AS SELECT id, my_note FROM {db}.orders WHERE status = 'paid'")

        write_table(tmp_path / "src", "orders", [SOURCE[1], order(4, "org_1", ts(1, 4), status="paid")])
        outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
        assert outcome.destination_metadata["mariadb_rows_deleted"] == 1
        assert "schema_drift" not in outcome.destination_metadata  # the recipient's column is not the source's
        assert _sql(target, "SELECT id, my_note FROM {db}.paid ORDER BY id") == [(2, "note 2"), (4, None)]
        with admin.cursor() as cur:
            cur.execute(f"SHOW GRANTS FOR '{user}'@'localhost'")
            grants = [g for (g,) in cur.fetchall()]
        assert f"GRANT SELECT ON `{target.destination.database}`.`orders` TO `{user}`@`localhost`" in grants
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'localhost'")
        admin.close()


def test_the_password_comes_from_its_variable_and_never_shows(env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _configure(tmp_path, SOURCE)
    doc = yaml.safe_load(config.read_text())
    doc["destinations"][0]["password_env"] = "INCSYNC_TEST_MARIADB_PASSWORD"
    config.write_text(yaml.safe_dump(doc))
    monkeypatch.delenv("INCSYNC_TEST_MARIADB_PASSWORD", raising=False)
    with pytest.raises(ConfigError) as missing:
        run(config, "2024-01-01", scheduled=False)
    assert missing.value.problems == [
        "destinations[acme_dest].password_env: variable INCSYNC_TEST_MARIADB_PASSWORD is not set; export the password in it"]

    monkeypatch.setenv("INCSYNC_TEST_MARIADB_PASSWORD", "s3cret-Pa55word")  # root has none: refused
    with pytest.raises(PublishError) as refused:
        run(config, "2024-01-01", scheduled=False)
    assert "cannot connect to MariaDB at 127.0.0.1:3306 as root" in str(refused.value)
    assert "Access denied" in str(refused.value) and "s3cret" not in str(refused.value)


def _two(root: Path, first: dict[str, Any], second: dict[str, Any]) -> Path:
    base = {"kind": "mariadb", "user": "root"}
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": "./src", "format": "parquet"}],
        "destinations": [{"name": "a", **base, **first}, {"name": "b", **base, **second}],
        "models": [{"model_name": "orders", "source": "lake", "source_table": "orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": 1704067200}],
        "recipients": [{"id": "acme", "id_in_provider_system": "org_1", "destination": "a"},
                       {"id": "globex", "id_in_provider_system": "org_2", "destination": "b"}],
    }
    file = root / "incsync.yaml"
    file.write_text(yaml.safe_dump(doc))
    return file


def test_validate_refuses_two_recipients_on_one_database_of_one_server(tmp_path: Path) -> None:
    file = _two(tmp_path, {"host": "127.0.0.1", "database": "shop"}, {"host": "LOCALHOST", "port": 3306, "database": "shop"})
    with pytest.raises(ConfigError) as info:
        load_config(file)
    assert info.value.problems == [
        'destinations[1]: "b" (recipient globex) writes to the same location as "a" (recipient acme): '
        "mariadb://localhost:3306/shop; a mariadb destination holds one recipient's copy, so give \"b\" a location of its own"]
    load_config(_two(tmp_path, {"database": "shop"}, {"database": "shop", "port": 3307}))  # another server: fine
    load_config(_two(tmp_path, {"database": "shop"}, {"database": "Shop"}))  # database names are case-sensitive on Linux
    alias = load_config(_two(tmp_path, {"kind": "mysql", "database": "a"}, {"database": "b"}))
    assert build_destination(alias.destination("a")).kind == "mariadb"  # kind: mysql is the same destination


def test_a_server_or_client_refusing_local_files_fails_naming_the_setting(env, tmp_path: Path) -> None:
    from incsync.destinations.mariadb.connect import collation, connect, quote, run
    from incsync.destinations.mariadb.load import load_stage
    from incsync.destinations.mariadb.types import mariadb_form
    from incsync.staging.batch import stage_arrow

    batch = stage_arrow(pa.Table.from_pylist(SOURCE), tmp_path / "staged")
    config = load_config(_configure(tmp_path, SOURCE)).destination("acme_dest")
    with connect(config) as conn:  # a session that did not ask for local files: the server refuses them the same way
        run(conn, f"CREATE DATABASE {quote(config.database)}")
        with pytest.raises(PublishError) as info:
            load_stage(conn, config.database, batch, mariadb_form(batch.schema), key=("id",), collation=collation(conn),
                       where="model orders, recipient acme")
    assert str(info.value).startswith("model orders, recipient acme: the MariaDB server refuses LOAD DATA LOCAL INFILE (")
    assert str(info.value).endswith("nothing was published. Fix: SET GLOBAL local_infile = ON on the server (or "
                                    "local_infile=1 in its configuration)")


def test_validate_connect_reaches_the_server_and_names_an_unset_password_variable(
        env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.cli.connectivity import check_connectivity

    config = _configure(tmp_path, SOURCE)
    assert check_connectivity(load_config(config)) == []
    doc = yaml.safe_load(config.read_text())
    doc["destinations"][0]["password_env"] = "INCSYNC_TEST_MARIADB_PASSWORD"
    config.write_text(yaml.safe_dump(doc))
    monkeypatch.delenv("INCSYNC_TEST_MARIADB_PASSWORD", raising=False)
    assert check_connectivity(load_config(config)) == [
        "destinations[acme_dest].password_env: variable INCSYNC_TEST_MARIADB_PASSWORD is not set; export the password in it"]

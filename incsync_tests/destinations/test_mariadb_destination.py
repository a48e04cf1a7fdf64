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
from incsync_tests.destinations.conformance.test_schema import BASE, TYPED, TYPED_ROWS, _row
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target, destination_env, destination_spec, mariadb_admin
from incsync_tests.support.lake import lake_config, order, ts, write_table

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


RETYPED = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("status", pa.int64()),
                     ("amount", pa.float64()), ("updated_at", pa.timestamp("us", tz="UTC"))])


def _retyped(ids: range, day: int) -> list[dict]:
    return [{**order(i, "org_1", ts(1, day)), "status": i * 10} for i in ids]


def _leftovers(target: Target) -> list[str]:
    """Tables a swap builds or parks, and pending swaps, still in the database."""
    found = _sql(target, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                         "(TABLE_NAME LIKE '\\_incsync\\_new\\_%%' OR TABLE_NAME LIKE '\\_incsync\\_old\\_%%')",
                 [target.destination.database])
    return [*(t for (t,) in found), *(f"pending {m}" for (m,) in _sql(target, "SELECT model_name FROM {db}._incsync_swaps"))]


def test_a_full_refresh_that_retypes_a_column_swaps_in_a_new_table_whole(env, tmp_path: Path) -> None:
    import threading

    old = [order(i, "org_1", ts(1, 1), status=f"s{i}") for i in range(1, 41)]
    config = _configure(tmp_path, old)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    _sql(target, "ALTER TABLE {db}.orders ADD COLUMN my_note TEXT")
    _sql(target, "UPDATE {db}.orders SET my_note = CONCAT('note ', id)")
    _sql(target, "CREATE VIEW {db}.noted AS SELECT id, status, my_note FROM {db}.orders")
    _sql(target, "CREATE TABLE {db}.audit (id BIGINT)")
    _sql(target, "CREATE TRIGGER {db}.orders_audit AFTER INSERT ON {db}.orders FOR EACH ROW INSERT INTO {db}.audit VALUES (NEW.id)")

    new = _retyped(range(21, 61), 2)  # status text -> bigint: no widening; 20 keys gone, 20 kept, 20 new
    whole = [sorted((str(r["id"]), str(r["status"])) for r in rows) for rows in (old, new)]
    seen: list[list[tuple]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.append(sorted((str(i), str(s)) for i, s in _sql(target, "SELECT id, status FROM {db}.noted")))

    reader = threading.Thread(target=poll, daemon=True)
    write_table(tmp_path / "src", "orders", new, RETYPED)
    reader.start()
    try:
        outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
    finally:
        done.set()
        reader.join(timeout=30)
    assert seen and all(snapshot in whole for snapshot in seen), [s for s in seen if s not in whole][:1]
    assert seen[-1] == whole[1]
    assert (outcome.destination_metadata["mariadb_rows_written"], outcome.destination_metadata["mariadb_rows_deleted"]) == (40, 20)
    assert _column_types(target)["status"] == "bigint(20)"
    assert _sql(target, "SELECT id, status, my_note FROM {db}.noted WHERE id IN (21, 40, 41) ORDER BY id") == [
        (21, 210, "note 21"), (40, 400, "note 40"), (41, 410, None)]  # the recipient's column kept for keys that stay
    assert [{k: v for k, v in r.items() if k != "my_note"} for r in target.rows()] == sorted(new, key=lambda r: r["id"])
    assert target.state().last_transfer == outcome.record
    assert _leftovers(target) == []
    _sql(target, "INSERT INTO {db}.orders (id, organization_id, status, amount, updated_at) VALUES (99, 'x', 1, 1, NOW())")
    assert _sql(target, "SELECT id FROM {db}.audit") == [(99,)]  # the trigger was re-created on the new table


def test_a_retyping_full_refresh_is_refused_on_a_table_in_a_foreign_key(env, tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    _sql(target, "CREATE TABLE {db}.lines (order_id BIGINT NOT NULL, CONSTRAINT lines_order FOREIGN KEY (order_id) "
                 "REFERENCES {db}.orders (id))")
    before = (target.raw_rows(), target.state())
    write_table(tmp_path / "src", "orders", _retyped(range(1, 3), 2), RETYPED)
    with pytest.raises(PublishError) as info:
        run(config, "2024-01-01", scheduled=False, full_refresh=True)
    assert str(info.value) == (
        f"model orders, recipient acme: {target.destination.database}.orders: this full refresh changes a column's type, "
        "which MariaDB can only do by building the table anew and swapping it in, and the table takes part in foreign key "
        "lines_order (lines -> orders); nothing was published. Fix: drop the foreign key, run the full refresh, then add it again.")
    assert (target.raw_rows(), target.state()) == before
    assert _leftovers(target) == []

    # A key from another database names that database.
    _sql(target, "DROP TABLE {db}.lines")
    other = f"{target.destination.database}_bi"
    _sql(target, f"CREATE DATABASE `{other}`")
    try:
        _sql(target, f"CREATE TABLE `{other}`.lines (order_id BIGINT NOT NULL, CONSTRAINT bi_order FOREIGN KEY (order_id) "
                     "REFERENCES {db}.orders (id))")
        with pytest.raises(PublishError, match=rf"foreign key bi_order \({other}\.lines -> orders\); nothing was published"):
            run(config, "2024-01-01", scheduled=False, full_refresh=True)
    finally:
        _sql(target, f"DROP DATABASE `{other}`")
    assert (target.raw_rows(), target.state()) == before


@pytest.mark.parametrize("point", ["mid_publish", "mariadb_after_swap"])
def test_a_retyping_full_refresh_killed_around_its_swap_is_whole_either_side(env, point: str, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from incsync.core.crashpoints import CRASH_ENV

    config = _configure(tmp_path, SOURCE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    _sql(target, "CREATE TABLE {db}.audit (id BIGINT)")
    _sql(target, "CREATE TRIGGER {db}.orders_audit AFTER INSERT ON {db}.orders FOR EACH ROW INSERT INTO {db}.audit VALUES (NEW.id)")
    before = (target.raw_rows(), target.state())
    new = _retyped(range(1, 4), 2)
    write_table(tmp_path / "src", "orders", new, RETYPED)
    proc = subprocess.run([sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(config), "2024-01-01", "--full-refresh"],
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, CRASH_ENV: point},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    if point == "mid_publish":  # before the swap: the old table and state, the new table left beside it
        assert (target.raw_rows(), target.state()) == before
        assert [t.startswith("_incsync_new_") for t in _leftovers(target)] == [True, False]
        outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
        assert outcome.record.transfer_type == "FULL_REFRESH"
    else:  # after it: the new rows, and the state already names the refresh (its log row comes with the next publish)
        assert target.rows() == [r for r in new if r["organization_id"] == "org_1"]
        refresh = target.state().last_transfer
        assert refresh.transfer_type == "FULL_REFRESH" and refresh != before[1].last_transfer
        assert sorted("pending" if t.startswith("pending") else t.split("_")[2] for t in _leftovers(target)) == ["old", "pending"]
        outcome = run(config, "2024-01-01", scheduled=False)
        logged = [r for (r,) in _sql(target, "SELECT transfer_id FROM {db}._incsync_transfers ORDER BY seq")]
        assert logged[-2:] == [refresh.transfer_id, outcome.record.transfer_id]
    assert target.rows() == [r for r in new if r["organization_id"] == "org_1"]
    assert target.state().last_transfer == outcome.record
    assert _leftovers(target) == []
    _sql(target, "INSERT INTO {db}.orders (id, organization_id, status, amount, updated_at) VALUES (99, 'x', 1, 1, NOW())")
    assert _sql(target, "SELECT id FROM {db}.audit") == [(99,)]

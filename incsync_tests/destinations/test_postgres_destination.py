"""PostgreSQL destination: type mapping, the transfer log, schema mismatch, stale writers, missing DSN."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync.errors import ConfigError, LeaseError, SchemaError
from incsync.staging.spark import stage
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, ts, write_table

TYPED = pa.schema([
    ("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC")),
    ("small", pa.int16()), ("medium", pa.int32()), ("ratio", pa.float32()), ("price", pa.decimal128(12, 2)),
    ("flag", pa.bool_()), ("local_time", pa.timestamp("us")), ("day", pa.date32()), ("blob", pa.binary()),
    ("tags", pa.list_(pa.string())),
])
EXPECTED_TYPES = {
    "id": "bigint", "organization_id": "text", "updated_at": "timestamp with time zone", "small": "smallint",
    "medium": "integer", "ratio": "real", "price": "numeric(12,2)", "flag": "boolean",
    "local_time": "timestamp without time zone", "day": "date", "blob": "bytea", "tags": "jsonb",
}
ROW: dict[str, Any] = {
    "id": 1, "organization_id": "org_1", "updated_at": ts(1, 1), "small": 7, "medium": 70_000, "ratio": 0.5,
    "price": Decimal("12.34"), "flag": True, "local_time": datetime(2024, 1, 1, 9, 30), "day": date(2024, 1, 1),
    "blob": b"\x00\xff", "tags": ["a", "b"],
}


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Any:
    with destination_env("postgres", monkeypatch):
        yield


def _config(root: Path, rows: list[dict[str, Any]], schema: pa.Schema = TYPED) -> Path:
    write_table(root / "src", "orders", rows, schema=schema)
    return lake_config(
        root,
        recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
        destinations=[destination_spec("postgres")],
        model={"columns": None, "lookback_seconds": 0},
    )


def test_types_map_and_round_trip(pg: None, tmp_path: Path) -> None:
    config = _config(tmp_path, [ROW, {**ROW, "id": 2, "organization_id": "org_2"}])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    with target.destination.connect() as conn:
        assert target.destination._columns(conn, "orders") == EXPECTED_TYPES
        pk = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = 'acme.orders'::regclass AND i.indisprimary"
        ).fetchall()
        assert pk == [("id",)]
    [row] = target.raw_rows()
    assert row == {**ROW, "ratio": 0.5, "blob": b"\x00\xff"}


def test_transfer_log_holds_every_record_field(pg: None, tmp_path: Path) -> None:
    config = _config(tmp_path, [ROW])
    outcome = run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    assert target.state().last_transfer == outcome.record
    with target.destination.connect() as conn:
        row = conn.execute(
            "SELECT transfer_id, rows_transferred, high_watermark, transfer_type FROM acme._incsync_transfers"
        ).fetchone()
    assert row == (outcome.record.transfer_id, 1, ts(1, 1), "INCREMENTAL")


def test_a_type_change_that_is_no_widening_waits_for_a_full_refresh(pg: None, tmp_path: Path) -> None:
    config = _config(tmp_path, [ROW])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = target.state()
    changed = TYPED.set(TYPED.get_field_index("small"), pa.field("small", pa.string()))
    write_table(tmp_path / "src", "orders", [{**ROW, "updated_at": ts(1, 2), "small": "seven"}], schema=changed)
    with pytest.raises(SchemaError, match=r"model orders, recipient acme: the source changed a column's type in a way "
                       r"acme.orders cannot hold in place \(column small is smallint in acme.orders but text in the "
                       r"source\); nothing was published. Fix: reload the recipient with the new type \(incsync transfer "
                       r"orders --recipient acme --full-refresh\)"):
        run(config, "2024-01-01", scheduled=False)
    assert target.state() == before
    outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
    assert outcome.destination_metadata["schema_change"] == "replaced small smallint→text (full refresh)"
    with target.destination.connect() as conn:
        assert target.destination._columns(conn, "orders")["small"] == "text"
    assert [(r["updated_at"], r["small"]) for r in target.raw_rows()] == [(ts(1, 2), "seven")]


def test_a_stale_writer_is_refused(pg: None, tmp_path: Path) -> None:
    config = _config(tmp_path, [ROW])
    target = Target(config)
    stale = target.state()
    outcome = run(config, "2024-01-01", scheduled=False)
    batch = stage(TYPED.empty_table(), tmp_path / "staging" / "late")
    record = dataclasses.replace(outcome.record, transfer_id="20240101T000000Z-000000000000")
    with pytest.raises(LeaseError, match=rf"transfer {outcome.record.transfer_id} committed to acme.orders after this "
                       "transfer read None; nothing was published"):
        target.destination.publish(model=target.model, recipient=target.recipient, batch=batch, record=record, expected=stale)
    assert target.state().last_transfer == outcome.record


def test_missing_dsn_variable_names_it_not_the_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PG_DSN_ENV, raising=False)
    config = _config(tmp_path, [ROW])
    with pytest.raises(ConfigError, match=rf"destinations\[acme_dest\].dsn_env: variable {PG_DSN_ENV} is not set"):
        Target(config).state()


def test_validate_connect_reports_an_unreachable_destination_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from incsync.cli.main import main

    config = _config(tmp_path, [ROW])
    monkeypatch.setenv(PG_DSN_ENV, "postgresql://nobody:s3cret-pw@127.0.0.1:1/none")
    assert main(["validate", "--connect", "-c", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"destination acme_dest: cannot connect to PostgreSQL with the DSN in ${PG_DSN_ENV}" in err
    assert "s3cret-pw" not in err


def test_csv_copy_keeps_empty_strings_nulls_and_special_characters(pg: None, tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC")),
                        ("status", pa.string()), ("amount", pa.float64()), ("paid", pa.bool_())])
    rows = [
        {"id": 1, "organization_id": "org_1", "updated_at": ts(1, 1, 0, 0, 123456), "status": "", "amount": 0.1, "paid": True},
        {"id": 2, "organization_id": "org_1", "updated_at": ts(1, 2), "status": None, "amount": None, "paid": None},
        {"id": 3, "organization_id": "org_1", "updated_at": ts(1, 3), "status": 'a"b,c\nd\\e', "amount": 1e-300, "paid": False},
    ]
    config = _config(tmp_path, rows, schema=schema)
    run(config, "2024-01-01", scheduled=False)
    assert sorted(Target(config).raw_rows(), key=lambda r: r["id"]) == rows


def test_a_malformed_dsn_is_not_echoed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, [ROW])
    monkeypatch.setenv(PG_DSN_ENV, "host=127.0.0.1 password s3cret-pw")
    with pytest.raises(ConfigError, match=rf"\${PG_DSN_ENV} is not a PostgreSQL connection string") as info:
        Target(config).state()
    assert "s3cret-pw" not in str(info.value)


def test_a_replayed_or_unchanged_batch_updates_no_row_and_a_changed_value_at_equal_time_does(pg: None, tmp_path: Path) -> None:
    rows = [{**ROW, "id": i} for i in (1, 2, 3)]
    config = _config(tmp_path, rows)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)

    def versions() -> dict[int, str]:
        with target.destination.connect() as conn:
            return dict(conn.execute("SELECT id, xmin::text FROM acme.orders").fetchall())

    before = versions()
    replay = run(config, "2024-01-01", scheduled=False)
    assert versions() == before  # no row rewritten: no new tuple version, no WAL, no dead rows
    assert (replay.record.rows_transferred, replay.destination_metadata["postgres_rows_written"]) == (3, 0)

    write_table(tmp_path / "src", "orders", [rows[0], {**rows[1], "small": 8}, rows[2]], schema=TYPED)
    changed = run(config, "2024-01-01", scheduled=False)
    after = versions()
    assert changed.destination_metadata["postgres_rows_written"] == 1
    assert [k for k in before if after[k] != before[k]] == [2]
    assert [r["small"] for r in target.rows()] == [7, 8, 7]

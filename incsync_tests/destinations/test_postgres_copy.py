"""A PostgreSQL destination's first transfers COPY straight into the table (issue 29): a table created in
the publish, and the later commits of a recipient's first backfill (``new_keys``), skip the stage table
and its ``INSERT ... ON CONFLICT``. A key the table held after all fails the COPY and the whole commit."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync.destinations.base import INCREMENTAL, DestinationState, TransferRecord
from incsync.errors import PublishError
from incsync.staging.batch import stage_arrow
from incsync_tests.support.destinations import Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, ts, write_table

SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("status", pa.string()),
                    ("updated_at", pa.timestamp("us", tz="UTC"))])


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with destination_env("postgres", monkeypatch):
        write_table(tmp_path / "src", "orders", [], schema=SCHEMA)
        config = lake_config(
            tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
            destinations=[destination_spec("postgres")], model={"columns": None, "lookback_seconds": 0},
        )
        yield Target(config)


def _publish(target: Target, tmp_path: Path, n: int, ids: list[int], *, status: str = "new",
             new_keys: bool = False) -> dict[str, object]:
    rows = [{"id": i, "organization_id": "org_1", "status": status, "updated_at": ts(1, i)} for i in ids]
    batch = stage_arrow(pa.Table.from_pylist(rows, schema=SCHEMA), tmp_path / f"stage{n}")
    state = target.state()
    record = TransferRecord(
        transfer_id=f"t{n}", model_name="orders", recipient_id="acme", window_start="2024-01-01T00:00:00+00:00",
        window_end="2024-01-02T00:00:00+00:00", lower_bound="2024-01-01T00:00:00+00:00",
        upper_bound="2024-01-02T00:00:00+00:00", rows_transferred=len(rows), delta_rows_transferred=len(rows),
        high_watermark_micros=int(max(r["updated_at"] for r in rows).timestamp() * 1_000_000), transfer_type=INCREMENTAL,
        fingerprint="f", lookback_seconds=0, committed_at="2024-01-02T00:00:00Z",
    )
    return target.destination.publish(model=target.model, recipient=target.recipient, batch=batch, record=record,
                                      expected=state, **({"new_keys": True} if new_keys else {}))


def _table(target: Target) -> list[tuple]:
    with target.destination.connect() as conn:
        return conn.execute("SELECT id, status FROM acme.orders ORDER BY id").fetchall()


def _log(target: Target) -> list[str]:
    with target.destination.connect() as conn:
        return [r[0] for r in conn.execute("SELECT transfer_id FROM acme._incsync_transfers ORDER BY seq")]


def test_a_first_backfill_copies_into_the_new_table_then_appends_its_later_commits(target: Target, tmp_path: Path) -> None:
    assert target.state() == DestinationState()
    first = _publish(target, tmp_path, 1, [1, 2, 3])
    assert first["postgres_rows_written"] == 3
    later = _publish(target, tmp_path, 2, [4, 5], new_keys=True)
    assert later["postgres_rows_written"] == 2
    assert _table(target) == [(1, "new"), (2, "new"), (3, "new"), (4, "new"), (5, "new")]
    assert _log(target) == ["t1", "t2"]
    assert target.state().last_transfer.transfer_id == "t2"
    # The table keeps its primary key: what a later upsert (no new_keys) relies on.
    changed = _publish(target, tmp_path, 3, [2, 6], status="paid")
    assert changed["postgres_rows_written"] == 2
    assert _table(target) == [(1, "new"), (2, "paid"), (3, "new"), (4, "new"), (5, "new"), (6, "paid")]


def test_a_key_the_table_held_after_all_fails_the_whole_append_and_nothing_is_committed(target: Target, tmp_path: Path) -> None:
    _publish(target, tmp_path, 1, [1, 2, 3])
    with pytest.raises(PublishError) as raised:
        _publish(target, tmp_path, 2, [4, 3], new_keys=True)
    assert "PostgreSQL publish to acme.orders failed and nothing was committed" in str(raised.value)
    assert "duplicate key value violates unique constraint" in str(raised.value)
    assert _table(target) == [(1, "new"), (2, "new"), (3, "new")]
    assert _log(target) == ["t1"]
    # The same batch as an upsert (what a retry of an ordinary incremental does) lands.
    _publish(target, tmp_path, 3, [4, 3], status="paid")
    assert _table(target) == [(1, "new"), (2, "new"), (3, "paid"), (4, "paid")]
    assert _log(target) == ["t1", "t3"]


def test_a_first_transfer_into_a_table_that_exists_upserts_from_the_stage(target: Target, tmp_path: Path) -> None:
    """The state says first transfer, but the table is there (a recipient's table handed over with
    ``incsync transfer-ownership``): the rows are merged into it, not COPYed (key 2 would fail a COPY)."""
    with target.destination.connect() as conn:
        conn.execute("CREATE SCHEMA acme")
        conn.execute("CREATE TABLE acme.orders (id bigint PRIMARY KEY, organization_id text, status text, "
                     "updated_at timestamptz)")
        conn.execute("INSERT INTO acme.orders VALUES (2, 'org_1', 'old', '2023-12-31T00:00:00Z')")
    target.destination.transfer_ownership(model=target.model, recipient=target.recipient, reason="handed over")
    assert target.state().last_transfer is None
    _publish(target, tmp_path, 1, [1, 2])
    assert _table(target) == [(1, "new"), (2, "new")]
    assert _log(target) == ["t1"]


PG_TS = {b"incsync.source_vendor": b"postgres", b"incsync.source_type": b"timestamp with time zone"}
PG_JSONB = {b"incsync.source_vendor": b"postgres", b"incsync.source_type": b"jsonb"}
WIDE = pa.schema([
    ("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC"), True, PG_TS),
    ("small", pa.int8()), ("unsigned", pa.uint32()), ("amount", pa.decimal128(12, 2)), ("payload", pa.string(), True, PG_JSONB),
    ("wall", pa.timestamp("ms")), ("clock", pa.time64("us")), ("day", pa.date32()), ("ratio", pa.float32()),
    ("blob", pa.binary()), ("note", pa.large_string()),
])


def _wanted(schema: pa.Schema) -> dict[str, str]:
    from incsync.destinations.postgres.types import pg_type

    return {f.name: pg_type(f) for f in schema}


def test_a_batch_goes_in_binary_only_when_every_column_has_its_exact_binary_form(tmp_path: Path) -> None:
    from incsync.destinations.postgres.binary import encoder

    rows = [{"id": 1, "organization_id": "org_1", "updated_at": ts(1, 1)}]
    batch = stage_arrow(pa.Table.from_pylist(rows, schema=WIDE), tmp_path / "wide")
    wanted = _wanted(WIDE)
    assert encoder(batch, wanted).schema.types == [
        pa.int64(), pa.string(), pa.timestamp("us", tz="UTC"), pa.int16(), pa.int64(), pa.decimal128(12, 2), pa.string(),
        pa.timestamp("us"), pa.time64("us"), pa.date32(), pa.float32(), pa.binary(), pa.large_string()]
    for column, other in [("organization_id", "uuid"), ("amount", "numeric(12,1)"), ("amount", "numeric(11,2)"),
                          ("small", "boolean"), ("unsigned", "integer"), ("wall", "timestamp with time zone"),
                          ("updated_at", "timestamp without time zone"), ("payload", "xml"), ("ratio", "double precision")]:
        assert encoder(batch, {**wanted, column: other}) is None, (column, other)
    assert encoder(batch, {**wanted, "amount": "numeric"}) is not None
    assert encoder(batch, {**wanted, "amount": "numeric(14,3)"}) is not None
    assert encoder(batch, {**wanted, "organization_id": "character varying(20)"}) is not None
    # A PostgreSQL timestamp holding 'infinity' (staged as the int64 extreme) cannot go in binary.
    endless = stage_arrow(pa.Table.from_pylist([{**rows[0], "updated_at": None}], schema=WIDE).set_column(
        2, WIDE.field("updated_at"), pa.array([2**63 - 1], pa.timestamp("us", tz="UTC"))), tmp_path / "endless")
    assert encoder(endless, wanted) is None


def test_binary_copy_loads_every_value_exactly(target: Target, tmp_path: Path) -> None:
    from datetime import date, datetime, time
    from decimal import Decimal

    from incsync.destinations.postgres.load import STAGE, copy_rows, create_stage

    rows = [
        {"id": 1, "organization_id": "org_1", "updated_at": datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
         "small": -128, "unsigned": 2**32 - 1, "amount": Decimal("-9999999999.99"), "payload": '{"n": [1, {"a": null}]}',
         "wall": datetime(1999, 12, 31, 23, 59, 59, 999_000), "clock": time(23, 59, 59, 999_999), "day": date(1, 1, 1),
         "ratio": 0.5, "blob": b"\x00\xff", "note": "naïve 🚀 \"q\" \\ ,\n"},
        {"id": 2, "organization_id": "", "updated_at": datetime(2000, 1, 1, tzinfo=UTC), "small": 127, "unsigned": 0,
         "amount": Decimal("0.01"), "payload": "null", "wall": datetime(2262, 4, 11), "clock": time(0),
         "day": date(9999, 12, 31), "ratio": -0.0, "blob": b"", "note": ""},
        {"id": 3, "organization_id": "org_1", "updated_at": ts(1, 3), **{f.name: None for f in WIDE if f.name not in
                                                                        ("id", "organization_id", "updated_at")}},
    ]
    batch = stage_arrow(pa.Table.from_pylist(rows, schema=WIDE), tmp_path / "wide")
    with target.destination.connect() as conn:
        create_stage(conn, _wanted(WIDE))
        copy_rows(conn, batch, _wanted(WIDE), into=STAGE)
        conn.execute("SET TIME ZONE 'UTC'")
        found = conn.execute("SELECT id, organization_id, updated_at::text, small, unsigned, amount::text, payload::text, "
                             "wall::text, clock::text, day::text, ratio, blob, note FROM pg_temp._incsync_stage ORDER BY id").fetchall()
        conn.rollback()
    assert found == [
        (1, "org_1", "1969-12-31 23:59:59.999999+00", -128, 2**32 - 1, "-9999999999.99", '{"n": [1, {"a": null}]}',
         "1999-12-31 23:59:59.999", "23:59:59.999999", "0001-01-01", 0.5, b"\x00\xff", "naïve 🚀 \"q\" \\ ,\n"),
        (2, "", "2000-01-01 00:00:00+00", 127, 0, "0.01", "null", "2262-04-11 00:00:00", "00:00:00", "9999-12-31", -0.0,
         b"", ""),
        (3, "org_1", "2024-01-01 03:00:00+00", None, None, None, None, None, None, None, None, None, None),
    ]

"""What a recipient builds on its PostgreSQL table survives every operation; readers never see a half refresh.

A customer's view, grant, index, row-level security policy, comments and own column stay through
incremental runs, a widening and a full refresh (the table keeps its identity); a reader polling during
a full refresh (READ COMMITTED and REPEATABLE READ) sees the old rows or the new, never none, unblocked.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from incsync.errors import SchemaError
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import PG_DSN_ENV, Target, _admin_connect, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, ts, write_table

SCHEMA = pa.schema([
    ("id", pa.int64()), ("organization_id", pa.string()), ("status", pa.string()), ("amount", pa.float64()),
    ("qty", pa.int32()), ("updated_at", pa.timestamp("us", tz="UTC")),
])
WIDE = SCHEMA.set(SCHEMA.get_field_index("qty"), pa.field("qty", pa.int64()))


def _row(i: int, updated: Any, status: str = "new", qty: int = 1, org: str = "org_1") -> dict[str, Any]:
    return {"id": i, "organization_id": org, "status": status, "amount": float(i), "qty": qty, "updated_at": updated}


@pytest.fixture
def role() -> Iterator[str]:
    """A cluster-wide role (the BI role a customer grants to), dropped after the test's database."""
    try:
        admin, _ = _admin_connect()
    except psycopg.OperationalError:
        pytest.skip("PostgreSQL is not reachable")  # the database fixture below fails instead under CI
    name = f"incsync_bi_{uuid.uuid4().hex[:8]}"
    with admin:
        admin.execute(f'CREATE ROLE "{name}"')
        yield name
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture
def pg(role: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with destination_env("postgres", monkeypatch):
        yield role


def _config(root: Path, rows: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> Path:
    write_table(root / "src", "orders", rows, schema=schema)
    return lake_config(
        root,
        recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
        destinations=[destination_spec("postgres")],
        model={"columns": None, "lookback_seconds": 0},
    )


def _dsn() -> str:
    import os

    return os.environ[PG_DSN_ENV]


CUSTOMER_OBJECTS = """
CREATE VIEW acme.order_totals AS SELECT organization_id, count(*) AS orders, sum(amount) AS amount
    FROM acme.orders GROUP BY organization_id;
GRANT USAGE ON SCHEMA acme TO {role};
GRANT SELECT ON acme.orders, acme.order_totals TO {role};
CREATE INDEX orders_by_status ON acme.orders (status);
ALTER TABLE acme.orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY hide_void ON acme.orders FOR SELECT TO {role} USING (status <> 'void');
COMMENT ON TABLE acme.orders IS 'orders shared by the provider';
COMMENT ON COLUMN acme.orders.status IS 'order status';
ALTER TABLE acme.orders ADD COLUMN reviewed boolean NOT NULL DEFAULT false;
UPDATE acme.orders SET reviewed = true WHERE id = 1;
"""


def _build_customer_objects(role: str) -> int:
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        for statement in filter(str.strip, CUSTOMER_OBJECTS.format(role=f'"{role}"').split(";")):
            conn.execute(statement)
        return conn.execute("SELECT 'acme.orders'::regclass::oid").fetchone()[0]


def _customer_objects(role: str) -> dict[str, Any]:
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        one = lambda q, *a: conn.execute(q, a).fetchone()[0]  # noqa: E731
        return {
            "oid": one("SELECT 'acme.orders'::regclass::oid"),
            "view": conn.execute("SELECT organization_id, orders, amount FROM acme.order_totals").fetchall(),
            "grant": one("SELECT has_table_privilege(%s, 'acme.orders', 'SELECT')", role),
            "view_grant": one("SELECT has_table_privilege(%s, 'acme.order_totals', 'SELECT')", role),
            "index": one("SELECT indexdef FROM pg_indexes WHERE schemaname = 'acme' AND indexname = 'orders_by_status'"),
            "rls": one("SELECT relrowsecurity FROM pg_class WHERE oid = 'acme.orders'::regclass"),
            "policy": one("SELECT qual FROM pg_policies WHERE schemaname = 'acme' AND policyname = 'hide_void'"),
            "comment": one("SELECT obj_description('acme.orders'::regclass, 'pg_class')"),
            "column_comment": one("SELECT col_description(attrelid, attnum) FROM pg_attribute "
                                  "WHERE attrelid = 'acme.orders'::regclass AND attname = 'status'"),
            "reviewed": conn.execute("SELECT id FROM acme.orders WHERE reviewed ORDER BY id").fetchall(),
        }


def _expected(oid: int, rows: list[dict[str, Any]], reviewed: list[int]) -> dict[str, Any]:
    mine = [r for r in rows if r["organization_id"] == "org_1"]
    return {
        "oid": oid,
        "view": [("org_1", len(mine), sum(r["amount"] for r in mine))],
        "grant": True,
        "view_grant": True,
        "index": "CREATE INDEX orders_by_status ON acme.orders USING btree (status)",
        "rls": True,
        "policy": "(status <> 'void'::text)",
        "comment": "orders shared by the provider",
        "column_comment": "order status",
        "reviewed": [(i,) for i in reviewed],
    }


def test_customer_objects_survive_incremental_widening_and_full_refresh(pg: str, tmp_path: Path) -> None:
    role = pg
    rows = [_row(1, ts(1, 1)), _row(2, ts(1, 2)), _row(3, ts(1, 3)), _row(9, ts(1, 3), org="org_2")]
    config = _config(tmp_path, rows)
    run(config, "2024-01-01", scheduled=False)
    oid = _build_customer_objects(role)
    target = Target(config)

    # Incremental: a new row and a changed one; the customer's column keeps its value.
    rows = [*rows[:1], _row(2, ts(1, 5), status="paid"), *rows[2:], _row(4, ts(1, 6))]
    write_table(tmp_path / "src", "orders", rows, schema=SCHEMA)
    outcome = run(config, "2024-01-01", scheduled=True)
    assert (outcome.record.rows_transferred, outcome.record.delta_rows_transferred) == (3, 2)  # 3 sits on the HW
    assert _customer_objects(role) == _expected(oid, rows, reviewed=[1])

    # The source widens qty to bigint: applied in place, the next value needs the wider type.
    rows = [*rows, _row(5, ts(1, 7), qty=5_000_000_000)]
    write_table(tmp_path / "src", "orders", rows, schema=WIDE)
    outcome = run(config, "2024-01-01", scheduled=True)
    assert outcome.record.transfer_type == "INCREMENTAL"
    assert outcome.destination_metadata["schema_change"] == "widened qty integer→bigint"
    assert outcome.destination_metadata["schema_drift"] == "changed qty integer→bigint"
    with target.destination.connect() as conn:
        assert target.destination._columns(conn, "orders")["qty"] == "bigint"
    assert _customer_objects(role) == _expected(oid, rows, reviewed=[1])
    assert {r["id"]: r["qty"] for r in target.raw_rows()}[5] == 5_000_000_000

    # A full refresh after row 3 was deleted at the source: contents replaced, identity and objects kept.
    rows = [r for r in rows if r["id"] != 3]
    write_table(tmp_path / "src", "orders", rows, schema=WIDE)
    outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
    assert (outcome.record.transfer_type, outcome.destination_metadata["postgres_rows_deleted"]) == ("FULL_REFRESH", 1)
    assert _customer_objects(role) == _expected(oid, rows, reviewed=[1])
    assert sorted(r["id"] for r in target.raw_rows()) == [1, 2, 4, 5]


def test_a_view_on_a_widened_column_fails_naming_it_and_loses_nothing(pg: str, tmp_path: Path) -> None:
    rows = [_row(1, ts(1, 1), qty=3)]
    config = _config(tmp_path, rows)
    run(config, "2024-01-01", scheduled=False)
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute("CREATE VIEW acme.big_orders AS SELECT id, qty FROM acme.orders WHERE qty > 2")
    target = Target(config)
    before = (target.state(), target.raw_rows())
    write_table(tmp_path / "src", "orders", [*rows, _row(2, ts(1, 2), qty=5_000_000_000)], schema=WIDE)
    with pytest.raises(SchemaError) as caught:
        run(config, "2024-01-01", scheduled=True)
    assert str(caught.value) == (
        "model orders, recipient acme: the source changed qty integer→bigint, but PostgreSQL cannot change the type "
        "of a column another object uses (view acme.big_orders uses column qty of acme.orders); nothing was "
        "published and acme.orders is as it was. Fix: change the column around the view in one transaction — "
        "BEGIN; DROP VIEW acme.big_orders; ALTER TABLE acme.orders ALTER COLUMN qty TYPE bigint; <recreate the "
        "view>; COMMIT; — then re-run the transfer."
    )
    assert (target.state(), target.raw_rows()) == before

    # Doing what the message says lets the next run through.
    with psycopg.connect(_dsn()) as conn:
        conn.execute("DROP VIEW acme.big_orders")
        conn.execute("ALTER TABLE acme.orders ALTER COLUMN qty TYPE bigint")
        conn.execute("CREATE VIEW acme.big_orders AS SELECT id, qty FROM acme.orders WHERE qty > 2")
    outcome = run(config, "2024-01-01", scheduled=True)
    assert "schema_change" not in outcome.destination_metadata
    with psycopg.connect(_dsn()) as conn:
        assert conn.execute("SELECT id, qty FROM acme.big_orders ORDER BY id").fetchall() == [(1, 3), (2, 5_000_000_000)]


OLD_ROWS = 20_000
NEW_IDS = range(1_001, 20_501)


class Reader(threading.Thread):
    """Polls acme.orders until stopped; records (rows, rows of the new version) and any error."""

    def __init__(self, isolation: str):
        super().__init__(daemon=True)
        self.isolation = isolation
        self.stop = threading.Event()
        self.seen: list[tuple[int, int]] = []
        self.snapshot_changes: list[tuple[tuple[int, int], tuple[int, int]]] = []
        self.errors: list[str] = []
        self.slowest = 0.0

    def _look(self, conn: psycopg.Connection) -> tuple[int, int]:
        started = time.monotonic()
        seen = conn.execute("SELECT count(*), count(*) FILTER (WHERE status = 'v2') FROM acme.orders").fetchone()
        self.slowest = max(self.slowest, time.monotonic() - started)
        self.seen.append(seen)
        return seen

    def run(self) -> None:
        try:
            with psycopg.connect(_dsn(), autocommit=True) as conn:
                conn.execute("SET lock_timeout = '1s'")  # a blocked reader fails instead of waiting
                while not self.stop.is_set():
                    if self.isolation == "repeatable read":
                        with conn.transaction():
                            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                            first = self._look(conn)
                            time.sleep(0.3)
                            second = self._look(conn)
                        if first != second:
                            self.snapshot_changes.append((first, second))
                    else:
                        self._look(conn)
                        time.sleep(0.02)
        except psycopg.Error as exc:
            self.errors.append(str(exc))


def test_readers_see_old_rows_or_new_and_are_not_blocked_during_a_full_refresh(pg: str, tmp_path: Path) -> None:
    old = [_row(i, ts(1, 1), status="v1") for i in range(1, OLD_ROWS + 1)]
    config = _config(tmp_path, old)
    run(config, "2024-01-01", scheduled=False)
    new = [_row(i, ts(1, 2), status="v2") for i in NEW_IDS]
    write_table(tmp_path / "src", "orders", new, schema=SCHEMA)
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        # The customer's statement trigger keeps the publish transaction open 2 s after its rows are in.
        conn.execute("CREATE FUNCTION acme.slow() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$BEGIN PERFORM pg_sleep(2); RETURN NULL; END$$")
        conn.execute("CREATE TRIGGER slow AFTER INSERT ON acme.orders FOR EACH STATEMENT EXECUTE FUNCTION acme.slow()")

    readers = [Reader("read committed"), Reader("repeatable read")]
    for reader in readers:
        reader.start()
    time.sleep(0.5)
    outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
    time.sleep(0.5)
    for reader in readers:
        reader.stop.set()
        reader.join(timeout=10)

    old_state, new_state = (OLD_ROWS, 0), (len(NEW_IDS), len(NEW_IDS))
    assert outcome.record.rows_transferred == len(NEW_IDS)
    for reader in readers:
        assert reader.errors == [], reader.isolation
        assert set(reader.seen) == {old_state, new_state}, reader.isolation
        assert reader.slowest < 1.0, reader.isolation
    assert readers[1].snapshot_changes == []


def test_a_policy_on_a_widened_column_fails_naming_it(pg: str, tmp_path: Path) -> None:
    rows = [_row(1, ts(1, 1), qty=3)]
    config = _config(tmp_path, rows)
    run(config, "2024-01-01", scheduled=False)
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute("ALTER TABLE acme.orders ENABLE ROW LEVEL SECURITY")
        conn.execute(f'CREATE POLICY small_only ON acme.orders FOR SELECT TO "{pg}" USING (qty < 100)')
    write_table(tmp_path / "src", "orders", [*rows, _row(2, ts(1, 2), qty=5_000_000_000)], schema=WIDE)
    with pytest.raises(SchemaError, match=r"\(policy small_only ON acme.orders uses column qty of acme.orders\); nothing "
                       r"was published .* BEGIN; DROP POLICY small_only ON acme.orders; ALTER TABLE acme.orders ALTER "
                       r"COLUMN qty TYPE bigint; <recreate the policy>; COMMIT;"):
        run(config, "2024-01-01", scheduled=True)
    assert [r["id"] for r in Target(config).raw_rows()] == [1]

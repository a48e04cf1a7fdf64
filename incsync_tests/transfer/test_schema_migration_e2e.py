"""The issue's scenario end to end: a PostgreSQL source migrated while incsync runs (through Spark JDBC and
Dagster), into each destination kind. `qty int → bigint`, `code varchar(10) → text` and an added column
need no full refresh and no operator; the next scheduled run carries a value only bigint holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.destinations import MATRIX_KINDS, Target, destination_env, destination_spec
from incsync_tests.support.jdbc import pg_database
from incsync_tests.support.lake import latest_metadata, materialize_partition, ts

MODEL_KEY = ("db", "orders")
INCREMENTAL = {"incsync/mode": "incremental"}
BIG = 5_000_000_000


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


def _config(root: Path, jdbc_url: str, user: str, kind: str) -> Path:
    doc = {
        "sources": [{"name": "db", "vendor": "postgres", "jdbc_url": jdbc_url, "user": user}],
        "destinations": [destination_spec(kind)],
        "models": [{
            "model_name": "orders", "source": "db", "source_table": "orders", "primary_key": ["id"],
            "last_modified_column": "updated_at", "organization_column": "organization_id",
            "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(ts(1).timestamp()),
        }],
        "recipients": [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_source_migration_keeps_the_sync_running(kind: str, spark, dagster_instance, tmp_path: Path, capsys) -> None:
    from incsync.cli.main import main

    with pg_database() as db:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, code varchar(10), "
                   "qty integer, updated_at timestamptz NOT NULL)")
        db.execute("INSERT INTO orders VALUES (1, 'org_1', 'A-1', 7, %s), (2, 'org_2', 'B-1', 8, %s), "
                   "(3, 'org_1', 'A-3', 9, %s)", [ts(1, 1), ts(1, 2), ts(1, 3)])
        config = _config(tmp_path, db.jdbc_url, db.user, kind)
        defs = build_definitions(config)
        target = Target(config)
        materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme", model_key=MODEL_KEY)

        # The migration, then new data only the new types hold.
        db.execute("ALTER TABLE orders ALTER COLUMN qty TYPE bigint, ALTER COLUMN code TYPE text")
        db.execute("INSERT INTO orders VALUES (4, 'org_1', %s, %s, %s)", ["A-4-" + "x" * 40, BIG, ts(1, 5)])
        db.execute("UPDATE orders SET qty = %s, updated_at = %s WHERE id = 1", [-BIG, ts(1, 6)])
        capsys.readouterr()
        assert main(["validate", "--connect", "-c", str(config)]) == 0
        # PostgreSQL → PostgreSQL keeps varchar(10) as the source has it (docs/types.md), so its widening shows too.
        changed = "code character varying(10)→text, qty integer→bigint" if kind == "postgres" else "qty integer→bigint"
        assert capsys.readouterr().out.splitlines()[-2:] == [
            "every source and destination answered",
            f"  models.orders (recipient acme): source schema drift: changed {changed}; the next transfer applies it in place",
        ]
        materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme", model_key=MODEL_KEY,
                              tags=INCREMENTAL)
        meta = latest_metadata(dagster_instance, MODEL_KEY)
        assert (meta["transfer_type"], meta["schema_change"], meta["schema_drift"]) == (
            "INCREMENTAL", "widened " + changed.replace(", ", "; widened "), f"changed {changed}")
        assert [(r["id"], r["code"], r["qty"]) for r in sorted(target.rows(), key=lambda r: r["id"])] == [
            (1, "A-1", -BIG), (3, "A-3", 9), (4, "A-4-" + "x" * 40, BIG)]

        db.execute("ALTER TABLE orders ADD COLUMN note text")
        db.execute("INSERT INTO orders VALUES (5, 'org_1', 'A-5', 1, %s, 'gift')", [ts(1, 7)])
        materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme", model_key=MODEL_KEY,
                              tags=INCREMENTAL)
        meta = latest_metadata(dagster_instance, MODEL_KEY)
        assert meta["transfer_type"] == "INCREMENTAL"
        assert meta["schema_change"].startswith("added note ")
        assert {r["id"]: r["note"] for r in target.rows()} == {1: None, 3: None, 4: None, 5: "gift"}

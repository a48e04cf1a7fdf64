"""A destination whose data and transfer log disagree is re-synced from the recipient's start (issue 13 item 1)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from incsync.destinations.registry import FULL_REFRESH
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

SOURCE = [
    order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)),
    order(4, "org_1", ts(2, 5)), order(5, "org_2", ts(2, 6)),
]


def _pg(statement: str) -> None:
    import psycopg

    with psycopg.connect(os.environ[PG_DSN_ENV], autocommit=True) as conn:
        conn.execute(statement)


def _duckdb(statement: str):
    def run(out: Path) -> None:
        import duckdb

        with duckdb.connect(f"{out}.duckdb") as con:
            con.execute(statement)
    return run


def _delta_empty(out: Path) -> None:
    from deltalake import DeltaTable

    DeltaTable(str(out / "orders")).delete()


def _delta_files(out: Path) -> None:
    for f in (out / "orders").glob("*.parquet"):
        f.unlink()


def _os_data_file(out: Path) -> None:
    next((out / "orders" / "recipient=acme").glob("dt=*/*.parquet")).unlink()


def _os_manifest_folders(out: Path) -> None:
    for folder in (out / "_manifests" / "orders").glob("dt=*"):
        shutil.rmtree(folder)


# (kind, what happened outside incsync, how the reason starts)
CASES: list[tuple[str, str, Any, str]] = [
    ("delta", "emptied", _delta_empty, "destination_reset: Delta table {out}/orders holds no rows, but its transfer log records transfer "),
    ("delta", "files-deleted", _delta_files, "destination_reset: 2 data file(s) of Delta table {out}/orders are missing (e.g. "),
    ("delta", "log-deleted", lambda out: shutil.rmtree(out / "orders" / "_delta_log"),
     "destination_reset: {out}/orders holds data files but no Delta log"),
    ("postgres", "table-dropped", lambda out: _pg("DROP TABLE acme.orders"),
     "destination_reset: table acme.orders was dropped while its transfer log records transfer "),
    ("postgres", "emptied", lambda out: _pg("DELETE FROM acme.orders"),
     "destination_reset: table acme.orders holds no rows, but its transfer log records transfer "),
    ("postgres", "log-deleted", lambda out: _pg("DROP TABLE acme._incsync_transfers"),
     "destination_reset: table acme.orders holds rows but no transfer record of this recipient"),
    ("object_storage", "manifests-deleted", lambda out: shutil.rmtree(out / "_manifests"),
     "destination_reset: prefix {out}/orders/recipient=acme holds rows but no transfer record of this recipient"),
    ("object_storage", "manifest-folders-deleted", _os_manifest_folders,
     "destination_reset: the manifests of prefix {out}/orders/recipient=acme were deleted ("),
    ("object_storage", "data-file-deleted", _os_data_file, "destination_reset: 1 data file(s) of manifest _manifests/orders/dt="),
    ("duckdb", "table-dropped", _duckdb("DROP TABLE orders"),
     "destination_reset: table main.orders of {out}.duckdb was dropped while its transfer log records transfer "),
    ("duckdb", "emptied", _duckdb("DELETE FROM orders"),
     "destination_reset: table main.orders of {out}.duckdb holds no rows, but its transfer log records transfer "),
    ("duckdb", "log-deleted", _duckdb("DROP TABLE _incsync_transfers"),
     "destination_reset: table main.orders of {out}.duckdb holds rows but no transfer record of this recipient"),
]


@pytest.mark.parametrize(("kind", "fault", "damage", "reason"), CASES, ids=[f"{k}-{f}" for k, f, _, _ in CASES])
def test_a_reset_destination_is_resynced_from_the_start(
    kind: str, fault: str, damage: Any, reason: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with destination_env(kind, monkeypatch):
        write_table(tmp_path / "src", "orders", SOURCE)
        config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "d"}],
                             destinations=[destination_spec(kind, name="d", folder="./out")])
        out = (tmp_path / "out").resolve()
        for window in ("2024-01-01", "2024-01-02"):
            arrow_transfer.run(config, window, scheduled=False)
        target = Target(config)
        assert target.state().reset_reason is None
        assert target.high_watermark() == ts(2, 5)

        damage(out)
        state = target.state()
        assert state.reset_reason is not None and state.reset_reason.startswith(reason.format(out=out)), state.reset_reason

        outcome = arrow_transfer.run(config, "2024-01-02", scheduled=True)  # a schedule tick: would continue from the HW
        assert outcome.full_refresh_reason == state.reset_reason
        assert outcome.record.transfer_type == FULL_REFRESH
        assert outcome.record.extra["full_refresh_reason"] == state.reset_reason
        assert outcome.bounds.lower == ts(1)  # the recipient's start, not the stale HW
        assert outcome.record.rows_transferred == 3
        assert sorted(r["id"] for r in target.rows()) == [1, 2, 4]
        assert target.state().reset_reason is None
        assert target.high_watermark() == ts(2, 5)


def test_through_dagster_the_reset_reason_and_owner_reach_the_metadata(
    spark, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    from incsync.config.tags import MODE_TAG
    from incsync.orchestration.definitions import build_definitions
    from incsync_tests.support.lake import latest_metadata, materialize_partition

    with destination_env("postgres", monkeypatch):
        write_table(tmp_path / "src", "orders", SOURCE)
        config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "d"}],
                             destinations=[destination_spec("postgres", name="d")])
        for window in ("2024-01-01", "2024-01-02"):
            materialize_partition(build_definitions(config), dagster_instance, window=window, recipient="acme")
        _pg("DROP TABLE acme.orders")
        materialize_partition(build_definitions(config), dagster_instance, window="2024-01-02", recipient="acme",
                              tags={MODE_TAG: "incremental"})
        meta = latest_metadata(dagster_instance)
        assert meta["full_refresh_reason"].startswith(
            "destination_reset: table acme.orders was dropped while its transfer log records transfer ")
        # Jan 2's own row; the full refresh marks Jan 1 too, with its two (docs/design.md#the-partition-view)
        assert (meta["transfer_type"], meta["rows_transferred"], meta["destination_owner"]) == ("FULL_REFRESH", 1, "acme")
        assert Target(config).state().last_transfer.rows_transferred == 3
        assert meta["lower_bound"] == ts(1).timestamp()
        assert sorted(r["id"] for r in Target(config).rows()) == [1, 2, 4]

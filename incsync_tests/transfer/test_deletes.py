"""Delete propagation (deletes: hard | soft): a row deleted at the source leaves each destination kind, or
is stamped _incsync_deleted_at, in the transfer's own commit; a mass delete stops unless allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.destinations import MATRIX_KINDS, destination_env
from incsync_tests.support.integrity import TYPED_ORDERS, config_for, insert, typed_rows, verify
from incsync_tests.support.jdbc import pg_database
from incsync_tests.support.lake import materialize_partition

MODEL_KEY = ("db", "orders")


def _run(config: Path, instance, *, tags: dict[str, str] | None = None, raise_on_error: bool = True,
         windows: tuple[str, ...] = ("2024-01-01", "2024-01-02")):
    defs = build_definitions(config)
    results = [materialize_partition(defs, instance, window=w, recipient="acme", model_key=MODEL_KEY, tags=tags,
                                     raise_on_error=raise_on_error) for w in windows]
    return results[-1]


def _rows(tmp_path: Path) -> list[dict]:
    from incsync.destinations.registry import build_destination

    config = load_config(tmp_path / "incsync.yaml")
    dest = build_destination(config.destination("acme_dest"))
    table = dest.current_rows(model=config.model("orders"), recipient=config.recipient("acme"))
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_hard_deletes_leave_with_the_transfer(kind: str, spark, dagster_instance, tmp_path: Path, monkeypatch) -> None:
    with destination_env(kind, monkeypatch), pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, kind, model={"deletes": "hard"})
        _run(config, dagster_instance)
        db.execute("DELETE FROM orders WHERE id IN (4, 7)")
        _run(config, dagster_instance, windows=("2024-01-02",))  # the removal rides on any transfer of the recipient
        ids = [r["id"] for r in _rows(tmp_path)]
        assert ids == [i for i in range(1, 21) if i not in (4, 7)]
        state = verify(config, spark, tmp_path).state
        assert state is not None and state.last_transfer.extra["rows_removed"] == "2"
        assert verify(config, spark, tmp_path).passed


@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_soft_deletes_stamp_the_row(kind: str, spark, dagster_instance, tmp_path: Path, monkeypatch) -> None:
    with destination_env(kind, monkeypatch), pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, kind, model={"deletes": "soft"})
        _run(config, dagster_instance)
        db.execute("DELETE FROM orders WHERE id = 4")
        _run(config, dagster_instance, windows=("2024-01-02",))
        rows = {r["id"]: r for r in _rows(tmp_path)}
        assert len(rows) == 20
        assert rows[4]["_incsync_deleted_at"] is not None
        assert all(r["_incsync_deleted_at"] is None for i, r in rows.items() if i != 4)
        assert verify(config, spark, tmp_path).passed  # stamped rows are no longer part of the copy
        from incsync_tests.support.lake import ts

        insert(db, [(*r[:7], ts(2, 23, 30)) for r in typed_rows() if r[0] == 4])  # the key comes back at the source
        _run(config, dagster_instance, windows=("2024-01-02",))
        assert _rows(tmp_path)[3]["_incsync_deleted_at"] is None


def test_a_mass_delete_stops_unless_allowed(spark, dagster_instance, tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, "delta", model={"deletes": "hard"})
        _run(config, dagster_instance)
        db.execute("DELETE FROM orders WHERE id <= 5")  # 5 of 20: past the default max_delete_fraction 0.1
        failed = _run(config, dagster_instance, raise_on_error=False, windows=("2024-01-02",))
        assert not failed.success
        assert len(_rows(tmp_path)) == 20  # nothing published
        _run(config, dagster_instance, tags={"incsync/allow_mass_delete": "true"}, windows=("2024-01-02",))
        assert [r["id"] for r in _rows(tmp_path)] == list(range(6, 21))

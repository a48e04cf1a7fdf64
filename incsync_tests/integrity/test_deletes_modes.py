"""One meaning per `deletes` mode, through transfer, verify and repair, against a real PostgreSQL and MariaDB source:
a row deleted at the source and a row moved to another tenant are kept and reported as retained (none),
removed (hard) or stamped _incsync_deleted_at (soft) — by the next transfer and by repair alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.destinations import destination_env
from incsync_tests.support.integrity import TYPED_ORDERS, config_for, insert, typed_rows, verify
from incsync_tests.support.jdbc import pg_database
from incsync_tests.support.lake import materialize_partition

MODEL_KEY = ("db", "orders")
KEPT = ("kept {n} row(s) that are no longer the tenant's in the source (the model says deletes: none, which keeps "
        "them; deletes: hard or soft would remove them)")


def _transfer(config: Path, instance, windows: tuple[str, ...]) -> None:
    defs = build_definitions(config)
    for window in windows:
        materialize_partition(defs, instance, window=window, recipient="acme", model_key=MODEL_KEY)


def _copy(config_path: Path) -> tuple[list[int], list[int]]:
    """The destination's ids, and those stamped _incsync_deleted_at."""
    from incsync.destinations.registry import build_destination

    config = load_config(config_path)
    dest = build_destination(config.destination("acme_dest"))
    rows = dest.current_rows(model=config.model("orders"), recipient=config.recipient("acme")).to_pylist()
    return sorted(r["id"] for r in rows), sorted(r["id"] for r in rows if r.get("_incsync_deleted_at") is not None)


def _leave(db, deleted: int, moved: int) -> None:
    db.execute("DELETE FROM orders WHERE id = %s", (deleted,))
    db.execute("UPDATE orders SET organization_id = 'org_2' WHERE id = %s", (moved,))  # another tenant's now


def _counts(**wrong: int) -> dict[str, int]:
    base = dict.fromkeys(("total_rows_pending", "total_rows_stale", "total_rows_missing", "total_rows_incorrect",
                          "total_rows_orphaned", "total_rows_retained"), 0)
    return {**base, **wrong}


@pytest.mark.parametrize("kind", ["delta", "postgres"])
@pytest.mark.parametrize("mode", ["none", "hard", "soft"])
def test_a_moved_and_a_deleted_row_under_each_deletes_mode(
    mode: str, kind: str, spark, dagster_instance, tmp_path: Path, monkeypatch, capsys
) -> None:
    from incsync.cli.main import run_command
    from incsync.transfer.repair import repair_recipient

    all_ids = list(range(1, 21))
    with destination_env(kind, monkeypatch), pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, kind, model={"deletes": mode, "max_delete_fraction": 0.5})
        _transfer(config, dagster_instance, ("2024-01-01", "2024-01-02"))
        assert _copy(config) == (all_ids, [])

        # 1. Row 4 deleted, row 7 moved to org_2: verify, then the next transfer.
        _leave(db, deleted=4, moved=7)
        found = verify(config, spark, tmp_path)
        compared = {"total_rows_compared": 18}
        if mode == "none":
            assert found.passed, found.line()
            assert {**found.counts} == {**compared, **_counts(total_rows_retained=2)}
            assert sorted(found.findings.retained) == [(4,), (7,)] and found.findings.orphaned == []
            assert found.line().startswith(
                "PASS orders acme -> acme_dest: compared=18 pending=0 stale=0 missing=0 incorrect=0 orphaned=0 retained=2")
        else:
            assert not found.passed
            assert {**found.counts} == {**compared, **_counts(total_rows_orphaned=2)}
            assert sorted(found.findings.orphaned) == [(4,), (7,)] and found.findings.retained == []
        _transfer(config, dagster_instance, ("2024-01-02",))
        expected = {"none": (all_ids, []), "hard": ([i for i in all_ids if i not in (4, 7)], []),
                    "soft": (all_ids, [4, 7])}[mode]
        assert _copy(config) == expected

        # 2. Row 9 deleted, row 10 moved: repair alone.
        _leave(db, deleted=9, moved=10)
        loaded = load_config(config)
        done = repair_recipient(loaded, loaded.model("orders"), loaded.recipient("acme"), spark=lambda: spark,
                                staging_root=tmp_path / "repair-staging")
        if mode == "none":
            assert done.transfer_id is None and (done.rows_removed, done.rows_retained) == (0, 4)
            assert done.line() == f"orders acme: nothing to repair; {KEPT.format(n=4)}"
            assert _copy(config) == (all_ids, [])
        else:
            assert done.transfer_id is not None and (done.rows_removed, done.rows_retained, done.rows_replaced) == (2, 0, 0)
            assert done.line().endswith("and removed 2 orphaned row(s)")
            gone = (4, 7, 9, 10)
            assert _copy(config) == ({"hard": ([i for i in all_ids if i not in gone], []), "soft": (all_ids, list(gone))}[mode])

        # 3. What verify says now, through the command line: every mode passes.
        assert run_command(["verify", "orders", "-c", str(config), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        retained = 4 if mode == "none" else 0
        assert {k: doc[k] for k in ("passed", "deletes", "total_rows_compared", "total_rows_orphaned", "total_rows_retained",
                                    "total_rows_missing")} == {
            "passed": True, "deletes": mode, "total_rows_compared": 16, "total_rows_orphaned": 0,
            "total_rows_retained": retained, "total_rows_missing": 0}
        assert run_command(["repair", "orders", "-c", str(config)]) == 0
        out = capsys.readouterr().out
        assert out == f"orders acme: nothing to repair{'; ' + KEPT.format(n=4) if mode == 'none' else ''}\n"


@pytest.mark.parametrize("mode", ["none", "hard", "soft"])
def test_a_moved_and_a_deleted_row_under_each_deletes_mode_from_mariadb(
    mode: str, spark, dagster_instance, tmp_path: Path
) -> None:
    """The same meanings with a MariaDB source (a Delta copy): transfer, verify and repair."""
    from incsync.transfer.repair import repair_recipient
    from incsync_tests.support.jdbc import jdbc_config, maria_database

    all_ids = list(range(1, 13))
    with maria_database() as db:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id varchar(64) NOT NULL, "
                   "status varchar(16), updated_at datetime(6) NOT NULL)")
        db.execute("INSERT INTO orders VALUES " + ", ".join(
            f"({i}, 'org_1', 's{i % 3}', '2024-01-0{1 + i % 2} {i:02d}:00:00.{100 + i:06d}')" for i in all_ids)
            + ", (1001, 'org_2', 'x', '2024-01-01 03:00:00')")
        config = jdbc_config(tmp_path, db, recipients=[{"id": "acme", "id_in_provider_system": "org_1",
                                                        "destination": "acme_dest"}],
                             model={"deletes": mode, "max_delete_fraction": 0.5, "last_modified_timezone": "UTC"})
        _transfer(config, dagster_instance, ("2024-01-01", "2024-01-02"))
        assert _copy(config) == (all_ids, [])

        db.execute("DELETE FROM orders WHERE id = 4; UPDATE orders SET organization_id = 'org_2' WHERE id = 7")
        found = verify(config, spark, tmp_path)
        wrong = {"total_rows_retained": 2} if mode == "none" else {"total_rows_orphaned": 2}
        assert found.passed == (mode == "none"), found.line()
        assert {**found.counts} == {"total_rows_compared": 10, **_counts(**wrong)}
        _transfer(config, dagster_instance, ("2024-01-02",))
        assert _copy(config) == {"none": (all_ids, []), "hard": ([i for i in all_ids if i not in (4, 7)], []),
                                 "soft": (all_ids, [4, 7])}[mode]

        db.execute("DELETE FROM orders WHERE id = 9; UPDATE orders SET organization_id = 'org_2' WHERE id = 10")
        loaded = load_config(config)
        done = repair_recipient(loaded, loaded.model("orders"), loaded.recipient("acme"), spark=lambda: spark,
                                staging_root=tmp_path / "repair-staging")
        if mode == "none":
            assert done.line() == f"orders acme: nothing to repair; {KEPT.format(n=4)}"
            assert _copy(config) == (all_ids, [])
        else:
            assert (done.rows_removed, done.rows_retained) == (2, 0)
            gone = (4, 7, 9, 10)
            assert _copy(config) == {"hard": ([i for i in all_ids if i not in gone], []), "soft": (all_ids, list(gone))}[mode]
        after = verify(config, spark, tmp_path)
        assert after.passed and after.counts["total_rows_retained"] == (4 if mode == "none" else 0), after.line()

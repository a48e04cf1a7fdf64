"""Conformance: verify's counters, repair, and ``deletes: hard | soft`` for every destination kind.

The lake source is read by Spark here (verify and delete propagation hash the source's key space there);
``incsync_tests/integrity`` holds the vendor-specific cases (a PostgreSQL source, sampling, the asset check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from incsync.config.load import load_config
from incsync.integrity.verify import verify_recipient
from incsync.transfer.repair import repair_recipient
from incsync_tests.destinations.conformance.kinds import KINDS, damage
from incsync_tests.faults.support import transfer
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target, destination_env, destination_spec
from incsync_tests.support.integrity import every_damage
from incsync_tests.support.lake import lake_config, order, ts, write_table

ROWS = [order(i, "org_1", ts(1 + i % 2, i % 24, 0, 0, i), amount=i / 4) for i in range(1, 21)] + [order(100, "org_2", ts(1, 5))]
CLEAN = {"total_rows_compared": 20, "total_rows_pending": 0, "total_rows_stale": 0, "total_rows_missing": 0,
         "total_rows_incorrect": 0, "total_rows_orphaned": 0, "total_rows_retained": 0}


def _setup(root: Path, kind: str, rows: list[dict[str, Any]], deletes: str) -> tuple[Path, Target]:
    """The recipient's backfill, without Spark; then the file gets its ``deletes`` mode (delete propagation
    hashes the source's keys, through Spark for a lake source)."""
    write_table(root / "src", "orders", rows)

    def configure(mode: str) -> Path:
        return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                           destinations=[destination_spec(kind)], model={"lookback_seconds": 0, "deletes": mode})

    config = configure("none")
    for window in ("2024-01-01", "2024-01-02"):
        arrow_transfer.run(config, window, scheduled=False, staging_root=root / "staging")
    return configure(deletes), Target(config)


def _transfer(config: Path, window: str, spark, root: Path):
    return transfer(config, window, spark, staging_root=root / "staging")


def _verify(config: Path, spark, root: Path):
    cfg = load_config(config)
    return verify_recipient(cfg, cfg.model("orders"), cfg.recipient("acme"), spark=lambda: spark, staging_root=root / "verify")


def _ids(target: Target) -> list[int]:
    return [r["id"] for r in target.rows()]


@pytest.mark.parametrize("kind", KINDS)
def test_verify_counts_each_damage_repair_mends_it_and_hard_deletes_remove_keys(kind: str, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        config, target = _setup(tmp_path, kind, ROWS, "hard")
        clean = _verify(config, spark, tmp_path)
        assert clean.passed, clean.line()
        assert clean.counts == CLEAN

        damage(target, tmp_path, every_damage)  # 1 missing, 2 incorrect, 3 stale, 9999 orphaned
        found = _verify(config, spark, tmp_path)
        assert not found.passed
        assert found.counts == {**CLEAN, "total_rows_compared": 20, "total_rows_stale": 1, "total_rows_missing": 1,
                                "total_rows_incorrect": 1, "total_rows_orphaned": 1}
        assert (found.findings.missing, found.findings.incorrect, found.findings.stale) == ([(1,)], [(2,)], [(3,)])

        cfg = load_config(config)
        repaired = repair_recipient(cfg, cfg.model("orders"), cfg.recipient("acme"), spark=lambda: spark,
                                    staging_root=tmp_path / "repair")
        assert (repaired.rows_replaced, repaired.rows_removed) == (3, 1)
        after = _verify(config, spark, tmp_path)
        assert after.passed, after.line()
        assert target.rows() == sorted((r for r in ROWS if r["organization_id"] == "org_1"), key=lambda r: r["id"])

        write_table(tmp_path / "src", "orders", [r for r in ROWS if r["id"] not in (4, 7)])  # deleted at the source
        outcome = _transfer(config, "2024-01-02", spark, tmp_path)
        assert (outcome.record.extra["rows_removed"], outcome.record.extra["removal_mode"]) == ("2", "hard")
        assert _ids(target) == [i for i in range(1, 21) if i not in (4, 7)]
        assert target.state().last_transfer == outcome.record
        assert _verify(config, spark, tmp_path).passed


@pytest.mark.parametrize("kind", KINDS)
def test_soft_deletes_stamp_the_row_until_the_key_comes_back(kind: str, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        config, target = _setup(tmp_path, kind, ROWS, "soft")
        gone = [r for r in ROWS if r["id"] not in (4, 7)]
        write_table(tmp_path / "src", "orders", gone)
        outcome = _transfer(config, "2024-01-02", spark, tmp_path)
        assert (outcome.record.extra["rows_removed"], outcome.record.extra["removal_mode"]) == ("2", "soft")
        stamped = {r["id"]: r["_incsync_deleted_at"] for r in target.rows()}
        assert sorted(stamped) == list(range(1, 21))
        assert sorted(i for i, at in stamped.items() if at is not None) == [4, 7]
        assert _verify(config, spark, tmp_path).passed  # stamped rows are no longer part of the copy

        write_table(tmp_path / "src", "orders", [*gone, order(4, "org_1", ts(2, 23))])  # key 4 comes back at the source
        _transfer(config, "2024-01-02", spark, tmp_path)
        assert {r["id"]: r["_incsync_deleted_at"] for r in target.rows()}[4] is None

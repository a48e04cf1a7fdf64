"""incsync verify against a real PostgreSQL source and every destination kind: a true copy passes with
one read of the source; each kind of damage lands in exactly its own counter."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.destinations import MATRIX_KINDS, PG_DSN_ENV, destination_env
from incsync_tests.support.integrity import (
    TYPED_ORDERS,
    config_for,
    damage_destination,
    every_damage,
    insert,
    typed_rows,
    verify,
)
from incsync_tests.support.jdbc import pg_database
from incsync_tests.support.lake import materialize_partition

MODEL_KEY = ("db", "orders")


def transfer(config_path: Path, instance) -> None:
    defs = build_definitions(config_path)
    for window in ("2024-01-01", "2024-01-02"):
        materialize_partition(defs, instance, window=window, recipient="acme", model_key=MODEL_KEY)


@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_each_damage_lands_in_its_own_counter(kind: str, spark, dagster_instance, tmp_path: Path, monkeypatch) -> None:
    with destination_env(kind, monkeypatch), pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, kind, model={"deletes": "hard"})  # none: rows without a source row are retained
        transfer(config, dagster_instance)

        clean = verify(config, spark, tmp_path)
        assert clean.passed, clean.line()
        assert clean.counts == {"total_rows_compared": 20, "total_rows_pending": 0, "total_rows_stale": 0,
                                "total_rows_missing": 0, "total_rows_incorrect": 0, "total_rows_orphaned": 0,
                                "total_rows_retained": 0}
        assert (clean.buckets_differing, clean.source_reads) == (0, 1)  # nothing wrong: the source is read once

        damage_destination(kind, tmp_path, every_damage, dsn=os.environ.get(PG_DSN_ENV))
        db.execute("DELETE FROM orders WHERE id = 5")  # deleted at the source: orphaned in the destination
        db.execute("UPDATE orders SET status = 'later', updated_at = updated_at + interval '3 days' WHERE id = 6")  # pending

        found = verify(config, spark, tmp_path)
        assert not found.passed
        assert found.counts == {"total_rows_compared": 18, "total_rows_pending": 1, "total_rows_stale": 1,
                                "total_rows_missing": 1, "total_rows_incorrect": 1, "total_rows_orphaned": 2,
                                "total_rows_retained": 0}
        assert found.findings.missing == [(1,)] and found.findings.incorrect == [(2,)] and found.findings.stale == [(3,)]
        assert sorted(found.findings.orphaned) == [(5,), (9999,)]
        assert "status 'tampered' != source 's2'" in found.metadata()["examples_incorrect"]
        assert found.line().startswith(
            "FAIL orders acme -> acme_dest: compared=18 pending=1 stale=1 missing=1 incorrect=1 orphaned=2")


def test_bucket_hashes_agree_across_engines_for_common_types(spark, dagster_instance, tmp_path: Path, monkeypatch) -> None:
    """PostgreSQL source → Delta: every bucket's fingerprint matches, so no row is read twice."""
    with pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows(300))
        config = config_for(tmp_path, db, "delta")
        transfer(config, dagster_instance)
        result = verify(config, spark, tmp_path)
        assert result.counts["total_rows_compared"] == 300
        assert (result.buckets, result.buckets_differing) == (16, 0)


def test_sampling_checks_a_fixed_subset_of_buckets_and_says_so(spark, dagster_instance, tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows(300))
        config = config_for(tmp_path, db, "delta")
        transfer(config, dagster_instance)
        first = verify(config, spark, tmp_path, sampling_rate=0.25)
        again = verify(config, spark, tmp_path, sampling_rate=0.25)
        assert (first.buckets, first.buckets_checked) == (16, 4)
        assert 0 < first.counts["total_rows_compared"] < 300
        assert first.counts == again.counts
        assert "(sampled 4 of 16 buckets: sampling_rate 0.25)" in first.line()
        assert first.metadata()["sampling_rate"] == 0.25


def test_a_shifted_last_modified_is_stale_not_incorrect(spark, dagster_instance, tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, "delta")
        transfer(config, dagster_instance)

        def newer(rows):
            return [dict(r, updated_at=r["updated_at"] + timedelta(seconds=1)) if r["id"] == 4 else r for r in rows]

        damage_destination("delta", tmp_path, newer)
        result = verify(config, spark, tmp_path)
        assert result.findings.incorrect == [(4,)]  # newer than the source: no transfer writes that
        assert result.counts["total_rows_stale"] == 0


@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_repair_moves_only_the_wrong_keys_then_verify_passes(kind: str, spark, dagster_instance, tmp_path: Path, monkeypatch) -> None:
    from incsync.transfer.repair import repair_recipient

    with destination_env(kind, monkeypatch), pg_database() as db:
        db.execute(TYPED_ORDERS)
        insert(db, typed_rows())
        config = config_for(tmp_path, db, kind, model={"deletes": "hard"})
        transfer(config, dagster_instance)
        damage_destination(kind, tmp_path, every_damage, dsn=os.environ.get(PG_DSN_ENV))
        db.execute("DELETE FROM orders WHERE id = 5")
        db.execute("UPDATE orders SET status = 'later', updated_at = updated_at + interval '3 days' WHERE id = 6")

        loaded = load_config(config)
        done = repair_recipient(loaded, loaded.model("orders"), loaded.recipient("acme"), spark=lambda: spark,
                                staging_root=tmp_path / "repair-staging")
        assert (done.rows_replaced, done.rows_removed) == (3, 2)  # rows 1, 2, 3 re-sent; 5 and 9999 removed
        if kind == "object_storage":  # the repair's manifest says what it replaces
            import json

            manifest = json.loads(next((tmp_path / "out/acme/_manifests/orders").glob(f"dt=*/manifest_{done.transfer_id}.json")).read_text())
            assert (manifest["transfer_type"], manifest["replaced_rows"], manifest["removed_rows"]) == ("REPAIR", 3, 2)
            assert manifest["delete_files"][0]["row_count"] == 5 and manifest["delete_mode"] == "hard"
        assert "replaced 3 row(s) (missing 1, stale 1, incorrect 1) and removed 2 orphaned row(s)" in done.line()

        after = verify(config, spark, tmp_path)
        assert after.passed, after.line()
        assert after.counts["total_rows_compared"] == 18 and after.counts["total_rows_pending"] == 1
        state = after.state
        assert state is not None and state.last_transfer is not None
        assert state.last_transfer.transfer_type == "REPAIR" and state.last_transfer.transfer_id == done.transfer_id
        assert state.high_watermark.isoformat() == clean_hw(db)  # the HW did not move: id 6 is still pending

        again = repair_recipient(loaded, loaded.model("orders"), loaded.recipient("acme"), spark=lambda: spark,
                                 staging_root=tmp_path / "repair-staging")
        assert again.transfer_id is None and again.line() == "orders acme: nothing to repair"


def clean_hw(db) -> str:
    """The HW the two transfers committed: the newest org_1 row before id 6 moved (ids 5 and 6 excluded)."""
    from incsync_tests.support.integrity import typed_rows as rows

    return max(r[7] for r in rows() if r[1] == "org_1").isoformat()


def test_mariadb_source_fingerprints_agree_with_delta(spark, dagster_instance, tmp_path: Path) -> None:
    """MariaDB computes its buckets in SQL (through Spark JDBC): a true copy differs nowhere; a deleted row is missing."""
    from deltalake import DeltaTable

    from incsync_tests.sources.test_jdbc_sources import MARIA_ORDERS, maria_insert
    from incsync_tests.support.jdbc import jdbc_config, maria_database
    from incsync_tests.support.lake import ts

    with maria_database() as db:
        db.execute(MARIA_ORDERS.format(table="orders", lm="TIMESTAMP(6)"))
        maria_insert(db, "orders", [
            (i, "org_1", f"s{i % 3}", f"{i}.{i % 10}0" if i % 5 else "-0.01", f'{{"a": {i}}}', i % 2 == 0, ts(1 + i % 2, i % 24, 0, 0, i))
            for i in range(1, 41)
        ] + [(99, "ORG_1", "x", "1.00", "{}", True, ts(1, 1)), (100, "org_2", "x", "1.00", "{}", True, ts(1, 1))])
        config = jdbc_config(tmp_path, db)
        transfer(config, dagster_instance)
        clean = verify(config, spark, tmp_path)
        assert clean.passed and clean.counts["total_rows_compared"] == 40, clean.line()
        assert clean.buckets_differing == 0  # ORG_1 (equal under the collation) is not org_1's row
        DeltaTable(str(tmp_path / "out/acme/orders")).delete("id = 7")
        found = verify(config, spark, tmp_path)
        assert found.findings.missing == [(7,)] and found.counts["total_rows_missing"] == 1
        assert sum(found.counts[c] for c in ("total_rows_stale", "total_rows_incorrect", "total_rows_orphaned")) == 0

"""The `integrity` asset check of each model (lake source, Spark fingerprints): after each transfer, on
its own schedule, or only when launched; each recipient's result is recorded on its partitions, its
metadata holding Prequel's counters (per recipient through GraphQL: test_integrity_partitions.py)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import lake_config, materialize_partition, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
CHECK = dg.AssetCheckKey(MODEL, "integrity")


def _rows() -> list[dict]:
    return [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(1, 11), amount=2.5), order(3, "org_2", ts(1, 12))]


def _latest(instance: dg.DagsterInstance):
    return instance.event_log_storage.get_latest_asset_check_execution_by_key([CHECK]).get(CHECK)


def test_after_transfer_the_check_reports_the_counters(spark, dagster_instance, tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", _rows())
    defs = build_definitions(lake_config(tmp_path, model={"integrity_check": "after_transfer", "deletes": "hard"}))
    assert CHECK in defs.resolve_asset_graph().asset_check_keys
    result = materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme")
    [evaluation] = result.get_asset_check_evaluations()  # on the run's partition
    assert (evaluation.passed, evaluation.asset_check_key, evaluation.partition) == (True, CHECK, "acme|2024-01-01")
    metadata = {k: v.value for k, v in evaluation.metadata.items()}
    assert {k: metadata[k] for k in ("recipient", "sampling_rate", "total_rows_compared", "total_rows_missing",
                                     "total_rows_orphaned")} == {
        "recipient": "acme", "sampling_rate": 1.0, "total_rows_compared": 2, "total_rows_missing": 0, "total_rows_orphaned": 0}

    write_table(tmp_path / "src", "orders", _rows()[1:])  # row 1 deleted at the source
    job = defs.resolve_job_def("__ASSET_JOB").get_subset(asset_check_selection={CHECK}, asset_selection=set())
    alone = job.execute_in_process(instance=dagster_instance)
    [failed] = alone.get_asset_check_evaluations()  # the check alone: on acme's first window
    assert (failed.passed, failed.severity, failed.partition) == (False, dg.AssetCheckSeverity.WARN, "acme|2024-01-01")
    assert failed.metadata["total_rows_orphaned"].value == 1 and failed.metadata["recipient"].value == "acme"


def test_under_deletes_none_a_row_that_left_is_retained_and_the_check_passes(spark, dagster_instance, tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", _rows())
    defs = build_definitions(lake_config(tmp_path, model={"integrity_check": "after_transfer"}))  # deletes: none
    materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme")
    write_table(tmp_path / "src", "orders", _rows()[1:])  # row 1 deleted at the source
    job = defs.resolve_job_def("__ASSET_JOB").get_subset(asset_check_selection={CHECK}, asset_selection=set())
    kept = job.execute_in_process(instance=dagster_instance).get_asset_check_evaluations()[0]
    metadata = {k: v.value for k, v in kept.metadata.items()}
    assert kept.passed
    assert {k: metadata[k] for k in ("deletes", "total_rows_compared", "total_rows_orphaned", "total_rows_retained",
                                     "recipient")} == {
        "deletes": "none", "total_rows_compared": 1, "total_rows_orphaned": 0, "total_rows_retained": 1,
        "recipient": "acme"}
    assert "orphaned=0 retained=1" in metadata["details"]


@pytest.mark.parametrize("mode", ["manual", "schedule"])
def test_other_modes_keep_the_check_out_of_transfer_runs(mode: str, spark, dagster_instance, tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", _rows())
    defs = build_definitions(lake_config(tmp_path, model={"integrity_check": mode, "integrity_check_cron": "5 4 * * *"}))
    result = materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme")
    assert result.success and result.get_asset_check_evaluations() == []
    schedules = {s.name: s.cron_schedule for s in defs.schedules or []}
    if mode == "schedule":
        assert schedules["orders_integrity_schedule"] == "5 4 * * *"
        run = defs.resolve_job_def("orders_integrity_check").execute_in_process(instance=dagster_instance)
        assert run.get_asset_check_evaluations()[0].passed
    else:
        assert "orders_integrity_schedule" not in schedules


def test_a_failing_check_can_repair_the_copy(spark, dagster_instance, tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", _rows())
    defs = build_definitions(lake_config(tmp_path, model={"integrity_check": "after_transfer", "integrity_repair": True,
                                                          "deletes": "hard", "max_delete_fraction": 1.0}))
    materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme")
    write_table(tmp_path / "src", "orders", _rows()[1:])  # row 1 deleted at the source
    job = defs.resolve_job_def("__ASSET_JOB").get_subset(asset_check_selection={CHECK}, asset_selection=set())
    found = job.execute_in_process(instance=dagster_instance).get_asset_check_evaluations()[0]
    assert not found.passed and "removed 1 orphaned row(s)" in found.metadata["details"].value
    after = job.execute_in_process(instance=dagster_instance).get_asset_check_evaluations()[0]
    assert after.passed


def test_verify_and_repair_commands(spark, dagster_instance, tmp_path: Path, capsys) -> None:
    import json

    from deltalake import DeltaTable

    from incsync.cli.main import run_command

    write_table(tmp_path / "src", "orders", _rows())
    config = lake_config(tmp_path)
    materialize_partition(build_definitions(config), dagster_instance, window="2024-01-01", recipient="acme")
    assert run_command(["verify", "orders", "-c", str(config), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["passed"], doc["sampling_rate"], doc["total_rows_compared"], doc["recipient"]) == (True, 1.0, 2, "acme")

    DeltaTable(str(tmp_path / "out/acme/orders")).update({"status": "'tampered'"}, predicate="id = 2")
    assert run_command(["verify", "orders", "-c", str(config)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL orders acme -> acme_delta: compared=2 pending=0 stale=0 missing=0 incorrect=1 orphaned=0")
    assert "incorrect: (2,): status 'tampered' != source 'new'" in out

    assert run_command(["repair", "orders", "-c", str(config)]) == 0
    out = capsys.readouterr().out
    assert "replaced 1 row(s) (missing 0, stale 0, incorrect 1) and removed 0 orphaned row(s)" in out
    assert "then: PASS orders acme -> acme_delta" in out

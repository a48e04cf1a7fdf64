"""A transfer whose process died is ORPHANED, its run's slots released and its staging removed (faults item 7)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.dagster_run import DagsterRun

from incsync.cli.main import main
from incsync.config.load import load_config
from incsync.config.tags import HEARTBEAT_TAG, PROCESS_TAG
from incsync.core.crashpoints import PAUSE_ENV, PAUSE_FILE_ENV
from incsync.operations.liveness import STALE_AFTER, process_tag, reap
from incsync.operations.statuses import TransferStatus, list_transfers
from incsync.orchestration.triggers import REAPER_SENSOR
from incsync.staging.folders import claim
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

ASSET = dg.AssetKey(["lake", "orders"])
ORIGIN = RemoteJobOrigin(
    repository_origin=RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("incsync"), "__repository__"),
    job_name="__ASSET_JOB",
)


def _started_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> str:
    run = instance.add_run(DagsterRun(
        job_name="__ASSET_JOB", remote_job_origin=ORIGIN, run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.QUEUED,
        asset_selection=frozenset({ASSET}), tags={"incsync/recipient": "acme", "incsync/model": "orders", **tags},
    ))
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name), run_id=run.run_id)
    return run.run_id


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _status(instance, config, run_id: str) -> TransferStatus:
    return next(t.status for t in list_transfers(instance, config) if t.run_id == run_id)


def test_the_reaper_sensor_orphans_dead_runs_and_leaves_live_ones(
    tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    from incsync.orchestration.triggers import automation

    config_file = lake_config(tmp_path)
    config = load_config(config_file)
    now = time.time()
    dead = _started_run(dagster_instance, {PROCESS_TAG: process_tag(_dead_pid())})
    live = _started_run(dagster_instance, {PROCESS_TAG: process_tag()})
    reused = _started_run(dagster_instance, {PROCESS_TAG: f"{socket.gethostname()}:{os.getpid()}:1"})  # pid reused since
    stale = _started_run(dagster_instance, {PROCESS_TAG: "elsewhere:42:7", HEARTBEAT_TAG: f"{now - STALE_AFTER - 5:.0f}"})
    beating = _started_run(dagster_instance, {PROCESS_TAG: "elsewhere:43:7", HEARTBEAT_TAG: f"{now - 10:.0f}"})
    untagged = _started_run(dagster_instance, {})
    root = tmp_path / "stg"
    abandoned = root / "orders-acme-20240101T000000Z-aaaaaaaaaaaa"
    abandoned.mkdir(parents=True)
    (root / "orders-acme-20240101T000000Z-aaaaaaaaaaaa.lock").touch()
    stray_lock = root / "orders-fanout-20240101T000000Z-bbbbbbbbbbbb.lock"
    stray_lock.touch()
    os.utime(stray_lock, (now - 600, now - 600))
    in_use = root / "orders-acme-20240101T000001Z-cccccccccccc"

    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(root))
    sensors, _ = automation(str(config_file), config)
    [reaper] = [s for s in sensors if s.name == REAPER_SENSOR]
    with claim(in_use):
        in_use.mkdir()
        result = reaper(dg.build_sensor_context(instance=dagster_instance))
        assert sorted(p.name for p in root.iterdir()) == [in_use.name, f"{in_use.name}.lock"]

    assert "marked 3 run(s) ORPHANED" in result.skip_message
    statuses = {run: _status(dagster_instance, config, run) for run in (dead, live, reused, stale, beating, untagged)}
    assert statuses == {
        dead: TransferStatus.ORPHANED, live: TransferStatus.RUNNING, reused: TransferStatus.ORPHANED,
        stale: TransferStatus.ORPHANED, beating: TransferStatus.RUNNING, untagged: TransferStatus.RUNNING,
    }
    message = dagster_instance.get_records_for_run(dead, of_type=DagsterEventType.RUN_FAILURE).records[0].event_log_entry.message
    assert "is gone" in message and "marked ORPHANED" in message
    assert reap(dagster_instance) == []  # a second pass finds nothing more


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"incsync transfer ended ({proc.returncode}) before its pause point: {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("incsync transfer did not reach its pause point in time")
        time.sleep(0.1)


def test_a_sigkilled_incsync_transfer_is_orphaned_and_cleaned_at_the_next_incsync_transfers(
    connect_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))]
    write_table(tmp_path / "src", "orders", rows)
    config_file = lake_config(tmp_path)
    doc = yaml.safe_load(config_file.read_text())
    doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}  # a warm Spark: the client is a small process
    config_file.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    staging = Path(os.environ["INCSYNC_STAGING_DIR"])
    marker = tmp_path / "paused"
    argv = [str(Path(sys.executable).with_name("incsync")), "transfer", "orders", "--recipient", "acme",
            "--window", "2024-01-01", "-c", str(config_file)]
    proc = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, PAUSE_ENV: "after_staging", PAUSE_FILE_ENV: str(marker)},
    )
    try:
        _wait_for(marker, proc, timeout=240)
        os.kill(proc.pid, signal.SIGKILL)  # the transfer's own process, as the OOM killer or `kill -9` would
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert len([p for p in staging.iterdir() if p.is_dir()]) == 1
    config = load_config(config_file)
    with dg.DagsterInstance.get() as instance:
        [before] = list_transfers(instance, config)
        assert before.status == TransferStatus.RUNNING

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["transfers", "-c", str(config_file)]) == 0
    assert " ORPHANED " in out.getvalue() and "orders: ORPHANED 1" in out.getvalue()
    assert list(staging.iterdir()) == []  # folder and .lock
    assert not (tmp_path / "out" / "acme" / "orders").exists()

    # Nothing holds the (model, destination): the next transfer runs, and is exact.
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2]
    with dg.DagsterInstance.get() as instance:
        statuses = sorted(t.status.value for t in list_transfers(instance, config))
    assert statuses == ["ORPHANED", "SUCCESS"]
    assert list(staging.iterdir()) == []

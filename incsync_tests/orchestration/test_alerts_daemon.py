"""Alerts through a running `dagster-daemon`: a transfer the daemon launched (the recipient sensor's), one
`incsync transfer` ran and one a worker ran all fail; the alert sensor POSTs each exactly once to a local
webhook, naming the blamed party, with no secret in what it posts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.scheduler.instigation import InstigatorType

from incsync.config.load import load_config
from incsync.core.bounds import UTC
from incsync.operations.concurrency import dagster_yaml
from incsync.orchestration.alerts import ALERT_SENSOR
from incsync_tests.operations.test_blame import ACME_PG, LOGIN, PG
from incsync_tests.support.browser import stop_group
from incsync_tests.support.destinations import ROLE_DSN_ENV
from incsync_tests.support.lake import lake_config, order, write_table
from incsync_tests.support.webhook import webhook_server

REPO = Path(__file__).resolve().parents[2]
INCSYNC = str(Path(sys.executable).with_name("incsync"))
URL_ENV = "INCSYNC_TEST_ALERT_WEBHOOK"
PASSWORD = "s3cr3t-Pa55word"


def _wait(what: str, done: Callable[[], bool], *, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, f"dagster-daemon exited while waiting for {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s:\n{log.read_text()[-4000:]}"
        time.sleep(1)


def _sensor_started(instance: dg.DagsterInstance) -> bool:
    states = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR) if s.name == ALERT_SENSOR]
    return bool(states) and states[0].instigator_data is not None and states[0].instigator_data.cursor is not None


def _transfer(*args: str, env: dict[str, str]) -> str:
    """`incsync transfer --json ...` that fails: its run's id."""
    out = subprocess.run([INCSYNC, "transfer", *args, "--json"], capture_output=True, text=True, timeout=300, env=env,
                         check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    [run] = json.loads(out.stdout)["runs"]
    assert not run["success"]
    return run["run_id"]


@pytest.mark.slow  # ~2-3 min: make test-long (the same rule, ticked in process: test_alerts.py)
def test_each_failed_transfer_is_posted_once_whether_the_daemon_the_cli_or_a_worker_ran_it(
    connect_port: int, tmp_path: Path, pg_role
) -> None:
    role, admin_dsn = pg_role
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER ROLE "{role}" NOLOGIN')
    database = admin_dsn.rsplit("/", 1)[1]
    yesterday = (datetime.now(UTC) - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    window = yesterday.strftime("%Y-%m-%d")
    write_table(tmp_path / "src", "orders", [order(1, "org_1", yesterday + timedelta(hours=3))])
    config = lake_config(tmp_path, recipients=[ACME_PG], destinations=[PG], model={
        "min_start_time_epoch": int(yesterday.timestamp()), "frequency": "0 0 1 1 *"})  # no schedule tick meanwhile
    doc = yaml.safe_load(config.read_text())
    doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}
    doc["alerts"] = {"webhook_url_env": URL_ENV, "dagster_url": "https://dagster.example.com"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(dagster_yaml(load_config(config), REPO / "dagster.yaml", dagster_home=home))

    # The storages exist before the daemon and its code server start: SQLite storages two processes create at
    # once can be stamped with two schema heads, and then neither loads.
    with webhook_server() as hook, dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == [] and instance.all_instigator_state() == []
        instance.fetch_run_status_changes(dg.DagsterEventType.RUN_FAILURE, limit=1)
        env = {k: v for k, v in os.environ.items() if k != "INCSYNC_WORKER"} | {
            "DAGSTER_HOME": str(home), "INCSYNC_CONFIG": str(config), "DAGSTER_DISABLE_TELEMETRY": "yes",
            ROLE_DSN_ENV: f"postgresql://{role}:{PASSWORD}@127.0.0.1:5432/{database}", URL_ENV: hook.url,
        }
        log = tmp_path / "daemon.log"
        daemon = str(Path(sys.executable).with_name("dagster-daemon"))
        with open(log, "wb") as out:
            proc = subprocess.Popen([daemon, "run", "-w", str(REPO / "workspace.yaml")], cwd=tmp_path, env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        socket = tmp_path / "w.sock"
        worker = subprocess.Popen([INCSYNC, "worker", "-c", str(config), "--socket", str(socket)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait("the alert sensor's first tick", lambda: _sensor_started(instance), timeout=120, proc=proc, log=log)
            cli = _transfer("orders", "--recipient", "acme", "--window", window, "-c", str(config), env=env)
            _wait("the worker's socket", socket.exists, timeout=120, proc=proc, log=log)
            by_worker = _transfer("orders", "--recipient", "acme", "--window", window, "-c", str(config),
                                  "--worker", str(socket), env=env)

            def failed() -> list[dg.DagsterRun]:
                return instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))

            _wait("the recipient sensor's run failing", lambda: any(
                "dagster/sensor_name" in r.tags for r in failed()), timeout=180, proc=proc, log=log)
            _wait("a POST for each failed run", lambda: set(hook.run_ids()) >= {r.run_id for r in failed()},
                  timeout=120, proc=proc, log=log)
            time.sleep(40)  # one more tick of the sensor: nothing is posted again
            runs = {r.run_id: r for r in failed()}
        finally:
            stop_group(worker)
            stop_group(proc)

    launched = [r.run_id for r in runs.values() if r.tags.get("dagster/sensor_name") == "incsync_recipients"]
    assert launched and all(runs[r].remote_job_origin is not None for r in launched)
    assert runs[cli].remote_job_origin is None and runs[by_worker].remote_job_origin is None
    assert Counter(hook.run_ids()) == Counter(set(runs)), hook.run_ids()  # each failed run once, no other
    for posted in hook.posted:
        assert (posted["model"], posted["recipients"], posted["blamed"], posted["reason"]) == (
            "orders", ["acme"], "recipient", LOGIN)
        assert posted["run_url"] == f"https://dagster.example.com/runs/{posted['run_id']}"
    text = b"\n".join(hook.bodies).decode()
    assert PASSWORD not in text and "postgresql://" not in text and "T0KEN" not in text and role not in text

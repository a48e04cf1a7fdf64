"""Dagster on PostgreSQL, end to end: a real `dagster-daemon` over deploy/dagster.yaml and a fresh
database runs the recipient sensor, a schedule tick and an asset backfill; the runs it launches use a
Spark Connect server, so each costs a process start rather than a JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from incsync.config.load import load_config
from incsync.core.bounds import UTC
from incsync.operations.concurrency import dagster_yaml
from incsync_tests.support.browser import stop_group
from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.lake import delta_rows, lake_config, order, write_table

REPO = Path(__file__).resolve().parents[2]
MODEL = dg.AssetKey(["lake", "orders"])
URL_ENV = "INCSYNC_DAGSTER_PG_URL"
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]


def _wait(what: str, done: Callable[[], bool], *, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, f"dagster-daemon exited while waiting for {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s:\n{log.read_text()[-4000:]}"
        time.sleep(1)


def _runs(instance: dg.DagsterInstance, tag: str) -> list[dg.DagsterRun]:
    return [r for r in instance.get_runs() if tag in r.tags]


def _succeeded(instance: dg.DagsterInstance, tag: str, at_least: int = 1) -> bool:
    runs = _runs(instance, tag)
    failed = [r for r in runs if r.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)]
    assert not failed, f"{tag} run {failed[0].run_id} ended {failed[0].status}"
    return len(runs) >= at_least and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)


def _add_backfill(instance: dg.DagsterInstance, config_file: Path, keys: list[str]) -> str:
    """What the UI's "Launch backfill" stores; the daemon's BackfillDaemon plans and launches its runs."""
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    from incsync.orchestration.definitions import build_definitions

    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(), asset_graph=build_definitions(config_file).resolve_asset_graph(),
        partition_names=keys, asset_selection=[MODEL], backfill_timestamp=time.time(), tags={},
        dynamic_partitions_store=instance, all_partitions=False, title=None, description=None, run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill.backfill_id


@pytest.mark.slow  # ~45 s: make test-long (the same runs on SQLite: automation/test_job_names.py)
def test_sensor_schedule_and_backfill_through_the_daemon_on_postgres(
    connect_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    print(f"Spark Connect server ready (session fixture); test starts at {datetime.now(UTC):%H:%M:%S}")
    now = datetime.now(UTC)
    if (now + timedelta(minutes=3)).date() != now.date():  # the windows below are yesterday and today
        time.sleep(200)
        now = datetime.now(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    yesterday = today - timedelta(days=1)
    y_key, t_key = yesterday.strftime("%Y-%m-%d"), today.strftime("%Y-%m-%d")
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", yesterday + timedelta(hours=3)), order(2, "org_1", today + timedelta(seconds=1)),
        order(3, "org_2", yesterday + timedelta(hours=5)), order(4, "org_2", yesterday + timedelta(hours=6)),
    ])
    config_file = lake_config(tmp_path, recipients=RECIPIENTS, model={
        "min_start_time_epoch": int(yesterday.timestamp()), "frequency": "* * * * *"})
    doc = yaml.safe_load(config_file.read_text())
    doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}
    config_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    with postgres_database() as dsn:
        monkeypatch.setenv(URL_ENV, "postgresql+psycopg2://" + dsn.split("://", 1)[1])
        home = tmp_path / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text(dagster_yaml(load_config(config_file), REPO / "deploy" / "dagster.yaml", dagster_home=home))
        env = {**os.environ, "DAGSTER_HOME": str(home), "INCSYNC_CONFIG": str(config_file), "DAGSTER_DISABLE_TELEMETRY": "yes"}
        log = tmp_path / "daemon.log"
        daemon = str(Path(sys.executable).with_name("dagster-daemon"))
        with open(log, "wb") as out:
            proc = subprocess.Popen([daemon, "run", "-w", str(REPO / "workspace.yaml")], cwd=tmp_path, env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                assert type(instance.run_storage).__name__ == "PooledPostgresRunStorage"
                _wait("recipients registered by the sensor", lambda: sorted(instance.get_dynamic_partitions("recipients")) == ["acme", "globex"],
                      timeout=60, proc=proc, log=log)
                backfill_id = _add_backfill(instance, config_file, [f"acme|{y_key}", f"globex|{y_key}"])
                _wait("finished sensor, schedule and backfill runs", lambda: (
                    _succeeded(instance, "dagster/sensor_name") and _succeeded(instance, "dagster/schedule_name")
                    and _succeeded(instance, "dagster/backfill")), timeout=150, proc=proc, log=log)
                runs = instance.get_runs()
                records = instance.fetch_materializations(MODEL, limit=100).records
        finally:
            stop_group(proc)

    by_tag = {tag: sorted({r.tags[tag] for r in runs if tag in r.tags}) for tag in ("dagster/sensor_name", "dagster/schedule_name", "dagster/backfill")}
    assert by_tag == {"dagster/sensor_name": ["incsync_recipients"], "dagster/schedule_name": ["incsync_orders_schedule"],
                      "dagster/backfill": [backfill_id]}
    seen: dict[str, list[tuple[int, int]]] = {}
    order_of: dict[str, list[str]] = {}  # partition -> the runs that materialized it, in commit order
    for record in sorted(records, key=lambda r: r.timestamp):
        mat = record.asset_materialization
        seen.setdefault(mat.partition, []).append((mat.metadata["rows_transferred"].value, mat.metadata["delta_rows_transferred"].value))
        order_of.setdefault(mat.partition, []).append(record.run_id)
    # Sensor: both windows of both recipients; schedule tick(s): today; the backfill: yesterday again.
    # A tick committed after the sensor's run reads from each HW minus the lookback, so globex's row 4
    # (yesterday 06:00) is re-read; a tick that committed first (the minute turned as the daemon
    # started) found no HW and read today's window only.
    sensor_run = next(r.run_id for r in runs if "dagster/sensor_name" in r.tags)
    ticks = len([r for r in runs if "dagster/schedule_name" in r.tags])
    globex_today = order_of[f"globex|{t_key}"]
    after_sensor = globex_today.index(sensor_run)
    assert seen == {
        f"acme|{y_key}": [(1, 1), (1, 0)], f"globex|{y_key}": [(2, 2), (2, 0)],
        f"acme|{t_key}": [(1, 1)] + [(1, 0)] * ticks,
        f"globex|{t_key}": [(1, 0) if i > after_sensor else (0, 0) for i in range(len(globex_today))],
    }
    assert len(globex_today) == 1 + ticks
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "globex" / "orders")] == [3, 4]
    print(f"PostgreSQL-backed daemon end to end: {time.monotonic() - started:.0f} s, {len(runs)} runs, {ticks} schedule run(s)")

"""Rows dated in the future and the high watermark, through the model's real schedule (DESIGN "One transfer",
step 6): a row dated ahead of the clock in the open window is transferred and counted in
``future_dated_rows``, the HW stays at the extraction's start, so rows written afterwards, dated "now",
reach the recipient with the next scheduled run, and the future row is read again (once in the table).

A PostgreSQL source into an upsert destination (Delta, PostgreSQL): the schedule's tick is evaluated and
its run request executed in process, as the daemon would launch it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from incsync.config.load import load_config
from incsync.core.bounds import UTC, floor_to_second
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.definitions import build_definitions
from incsync.orchestration.schedules import schedule_name
from incsync_tests.support.destinations import Target, destination_env, destination_spec
from incsync_tests.support.jdbc import jdbc_config, pg_database
from incsync_tests.support.lake import latest_metadata

LOOKBACK = 1
DAY = 86_400
MODEL_KEY = ("db", "orders")


def _wait_for_a_quiet_part_of_the_day() -> None:
    """The rows and both runs must share today's window, and the row dated at its end must stay ahead of
    the clock until the second run: keep five minutes from either end of the day."""
    into_day = time.time() % DAY
    if into_day > DAY - 300:
        time.sleep(DAY - into_day + 120)
    elif into_day < 120:
        time.sleep(120 - into_day)


def _config(tmp_path: Path, db: Any, kind: str) -> Path:
    yesterday = int(time.time()) // DAY * DAY - DAY  # today's window is the open one, not the recipient's first
    path = jdbc_config(tmp_path, db, model={"min_start_time_epoch": yesterday, "frequency": "* * * * *"},
                       source={"lookback_seconds": LOOKBACK})
    doc = yaml.safe_load(path.read_text())
    doc["destinations"] = [destination_spec(kind)]
    doc["recipients"][0]["destination"] = destination_spec(kind)["name"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _scheduled_run(defs: dg.Definitions, instance: dg.DagsterInstance, model: Any) -> dg.ExecuteInProcessResult:
    """What the daemon does on a tick of the model's schedule now: evaluate it, launch its one run."""
    schedule = defs.resolve_schedule_def(schedule_name(model))
    context = dg.build_schedule_context(instance=instance, instance_ref=instance.get_ref(),
                                        repository_def=defs.get_repository_def(), scheduled_execution_time=datetime.now(UTC))
    [request] = schedule.evaluate_tick(context).run_requests or []
    assert request.tags["incsync/mode"] == "incremental"
    result = defs.resolve_job_def(request.job_name).execute_in_process(
        instance=instance, tags=request.tags, asset_selection=request.asset_selection)
    assert result.success
    return result


@pytest.mark.parametrize("kind", ["delta", "postgres"])
def test_a_row_dated_ahead_leaves_the_hw_at_the_extraction_start_and_later_rows_arrive(
    spark, tmp_path: Path, dagster_instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch, kind: str,
) -> None:
    _wait_for_a_quiet_part_of_the_day()
    with pg_database() as db, destination_env(kind, monkeypatch):
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, updated_at timestamptz(6) NOT NULL DEFAULT now())")
        db.execute(
            "INSERT INTO orders VALUES (1, 'org_1', now() - interval '1 minute'), "
            # hours ahead, in today's (the open) window: read by today's runs
            "(2, 'org_1', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day' - interval '1 second'), "
            "(3, 'org_1', now() + interval '1 day')"  # a day ahead: tomorrow's window, read by none of today's runs
        )
        dated = dict(db.execute("SELECT id, updated_at FROM orders"))
        config_path = _config(tmp_path, db, kind)
        config = load_config(config_path)
        model = config.model("orders")
        defs = build_definitions(config_path)
        dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
        target = Target(config_path)

        def rows() -> list[tuple[int, str, datetime]]:
            return [(r["id"], r["organization_id"], r["updated_at"]) for r in target.rows()]

        before = datetime.now(UTC)
        _scheduled_run(defs, dagster_instance, model)
        after = datetime.now(UTC)
        assert rows() == [(1, "org_1", dated[1]), (2, "org_1", dated[2])]
        first = latest_metadata(dagster_instance, MODEL_KEY)
        hw1 = target.high_watermark()
        assert hw1 is not None and before <= hw1 <= after < dated[2], f"HW {hw1} is not the first run's start"
        assert first["high_watermark_exact"] == hw1.isoformat()
        assert first["high_watermark_epoch_seconds"] == int(hw1.timestamp())  # rounded down
        assert first["source_horizon"] == hw1.timestamp()  # the extraction's start: nothing else held it
        assert (first["rows_transferred"], first["delta_rows_transferred"], first["future_dated_rows"]) == (2, 2, 1)

        db.execute("INSERT INTO orders (id, organization_id) VALUES (4, 'org_1')")  # written now, after the run
        [(written,)] = db.execute("SELECT updated_at FROM orders WHERE id = 4")
        assert hw1 < written < dated[2]

        _scheduled_run(defs, dagster_instance, model)
        done = datetime.now(UTC)
        assert rows() == [(1, "org_1", dated[1]), (2, "org_1", dated[2]), (4, "org_1", written)], \
            "row 4, written after the first run, must arrive with the next scheduled run"
        second = latest_metadata(dagster_instance, MODEL_KEY)
        hw2 = target.high_watermark()
        assert hw2 is not None and written < hw2 <= done < dated[2]
        assert second["high_watermark_exact"] == hw2.isoformat()
        assert second["lower_bound"] == (floor_to_second(hw1) - timedelta(seconds=LOOKBACK)).timestamp()
        # Rows 2 (still ahead: read again, and newer than the HW, so counted again) and 4; row 1 lies below the bounds.
        assert (second["rows_transferred"], second["delta_rows_transferred"], second["future_dated_rows"]) == (2, 2, 1)

"""A model's run stores its asset events in batches on a PostgreSQL-backed instance too (issue 29)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
import yaml
from sqlalchemy import event
from sqlalchemy.engine import Engine

import incsync.operations.reporting
from incsync.operations.dagster_compat import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    EVENT_BATCH_ENV_VAR,
)
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.lake import lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
DAYS = [f"2024-01-0{d}" for d in range(1, 7)]


def _six_windows_on_postgres(tmp_path: Path, check: Callable[[dg.DagsterInstance, str], None]) -> list[tuple[str, int]]:
    """One run of the model's job over six windows of one recipient (one transfer, one commit) on
    a fresh PostgreSQL-backed instance; ``check(instance, run_id)`` runs before the database goes. The
    inserts into ``event_logs``: (the event type of a one-row insert, else "", rows)."""
    write_table(tmp_path / "src", "orders", [order(d, "org_1", ts(d, 10)) for d in range(1, 7)])
    defs = build_definitions(lake_config(tmp_path))
    statements: list[tuple[str, int]] = []

    def count(_conn, _cursor, statement, parameters, _context, executemany) -> None:  # noqa: ANN001
        if statement.lstrip().upper().startswith("INSERT INTO EVENT_LOGS"):
            # a list of rows, or one statement of several (Dagster's .values(rows), SQLAlchemy's insertmanyvalues)
            rows = len(parameters) if isinstance(parameters, list | tuple) else max(1, statement.count("%(run_id_"))
            kind = parameters.get("dagster_event_type") if isinstance(parameters, dict) and rows == 1 else None
            statements.append((kind or "", rows))

    with postgres_database() as dsn:
        home = tmp_path / "home"
        home.mkdir()
        url = "postgresql+psycopg2://" + dsn.split("://", 1)[1]
        (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}}}))
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
            event.listen(Engine, "before_cursor_execute", count)
            try:
                result = defs.resolve_job_def("orders").execute_in_process(  # the model's job: incsync reports its events
                    instance=instance, asset_selection=[MODEL], raise_on_error=False,
                    tags={ASSET_PARTITION_RANGE_START_TAG: str(partition_key(DAYS[0], "acme")),
                          ASSET_PARTITION_RANGE_END_TAG: str(partition_key(DAYS[-1], "acme"))},
                )
            finally:
                event.remove(Engine, "before_cursor_execute", count)
            assert result.success
            check(instance, result.run_id)
    return statements


def test_a_runs_materializations_reach_postgres_storage_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark) -> None:
    monkeypatch.delenv(EVENT_BATCH_ENV_VAR, raising=False)
    monkeypatch.setattr(incsync.operations.reporting, "IN_PROGRESS_AFTER_SECONDS", 3600)  # however loaded the machine: none is slow
    got = []

    def check(instance: dg.DagsterInstance, _run_id: str) -> None:
        assert os.environ[EVENT_BATCH_ENV_VAR] == "10000"  # the run turned batches on as it started (its IO manager)
        records = instance.fetch_materializations(MODEL, limit=100).records
        got.extend(sorted((r.asset_materialization.partition, r.asset_materialization.metadata["rows_transferred"].value)
                          for r in records))
        # Each event (~3 KB) is compressed with lz4 where the server has it, not with PostgreSQL's default pglz.
        with instance.event_log_storage._connect() as conn:  # noqa: SLF001
            methods = {method for (method,) in conn.exec_driver_sql(
                "SELECT DISTINCT pg_column_compression(event) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")}
            lz4 = conn.exec_driver_sql(
                "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings WHERE name = 'default_toast_compression'").scalar()
            planned_default = conn.exec_driver_sql("SHOW default_toast_compression").scalar()
        assert methods == ({"lz4"} if lz4 else {"pglz"}), methods
        assert planned_default == "pglz"  # another connection keeps the server's default

    statements = _six_windows_on_postgres(tmp_path, check)
    assert got == [(f"acme|{day}", 1) for day in DAYS]
    # The six windows landed in one commit: their materializations reach the event log as ONE statement
    # of six rows (dagster-postgres' batch insert), not six round trips; nothing was planned.
    assert [rows for _, rows in statements if rows > 1] == [len(DAYS)]


def test_planned_windows_reach_postgres_storage_as_one_statement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark) -> None:
    """A slow span's windows are planned together (``dagster_compat.report_planned``): dagster-postgres
    would store each planned event alone, on a new connection (~25 ms apiece)."""
    monkeypatch.setattr(incsync.operations.reporting, "IN_PROGRESS_AFTER_SECONDS", 0)  # every span counts as slow

    def check(instance: dg.DagsterInstance, run_id: str) -> None:
        planned = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, limit=100).records
        assert sorted(r.event_log_entry.dagster_event.asset_materialization_planned_data.partition for r in planned) == [
            f"acme|{day}" for day in DAYS
        ]
        # Each planned window was materialized after it: none reads as in progress or failed.
        assert instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(MODEL) == {}

    statements = _six_windows_on_postgres(tmp_path, check)
    # Six planned events in one statement, then the commit's six materializations in another.
    assert [rows for _, rows in statements if rows > 1] == [len(DAYS), len(DAYS)]
    assert [kind for kind, rows in statements if rows == 1 and kind.startswith("ASSET_")] == []  # none alone

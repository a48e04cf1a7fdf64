"""The transfer log in the provider's warehouse (issue 32): real transfers from a real PostgreSQL source through
a real Dagster instance, one of them failing by the recipient's doing, logged by the `incsync_audit` asset into
a PostgreSQL or Delta destination of the provider's; the exact rows of its three tables, a pass run again
(nothing twice, nothing new), and a later transfer (exactly its row, the freshness moved)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from incsync.config.load import load_config
from incsync.core.bounds import UTC
from incsync.destinations.registry import build_destination
from incsync.operations.audit import TABLES, owner, table_model
from incsync.operations.dagster_compat import load_as_code_location
from incsync.orchestration.definitions import build_definitions
from incsync.orchestration.housekeeping import AUDIT_JOB, AUDIT_KEY, AUDIT_OP, AUDIT_SCHEDULE
from incsync_tests.operations.test_blame import FILE_IN_THE_WAY, run
from incsync_tests.support.lake import lake_config, latest_metadata

DB = dg.AssetKey(["db", "orders"])
AUDIT_DSN_ENV = "INCSYNC_TEST_AUDIT_DSN"
RECIPIENTS = [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
              {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta", "tags": {"tier": "gold"}}]


def test_without_audit_nothing_of_it_exists_and_with_it_an_asset_a_job_and_a_schedule(tmp_path: Path) -> None:
    config = lake_config(tmp_path)
    defs = build_definitions(config)
    assert AUDIT_KEY not in {s.key for s in defs.resolve_all_asset_specs()}
    assert AUDIT_JOB not in {j.name for j in defs.resolve_all_job_defs()}
    assert AUDIT_SCHEDULE not in {s.name for s in defs.schedules or []}

    doc = yaml.safe_load(config.read_text())
    doc["destinations"].append({"name": "warehouse", "kind": "delta", "path": "./warehouse"})
    doc["audit"] = {"destination": "warehouse", "frequency": "0 * * * *"}
    config.write_text(yaml.safe_dump(doc))
    defs = build_definitions(config)
    [spec] = [s for s in defs.resolve_all_asset_specs() if s.key == AUDIT_KEY]
    assert (spec.group_name, list(spec.deps)) == ("incsync_audit", [])
    [schedule] = [s for s in defs.schedules or [] if s.name == AUDIT_SCHEDULE]
    assert (schedule.cron_schedule, schedule.job_name) == ("0 * * * *", AUDIT_JOB)
    load_as_code_location(defs)  # the asset's op and the job share no name: `dagster dev` loads the location


@contextlib.contextmanager
def warehouse(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    if kind == "delta":
        yield {"name": "warehouse", "kind": "delta", "path": "./warehouse"}
        return
    from incsync_tests.support.destinations import postgres_database

    with postgres_database() as dsn:
        monkeypatch.setenv(AUDIT_DSN_ENV, dsn)
        yield {"name": "warehouse", "kind": "postgres", "dsn_env": AUDIT_DSN_ENV, "schema": "incsync_log"}


def drop_transfers(config: Path) -> None:
    import os
    import shutil

    import psycopg

    destination = build_destination(load_config(config).destination("warehouse"))
    if destination.kind == "delta":
        return shutil.rmtree(destination.table_path(table_model("transfers")))  # type: ignore[attr-defined]
    with psycopg.connect(os.environ[AUDIT_DSN_ENV], autocommit=True) as conn:
        conn.execute("DROP TABLE incsync_log.transfers")


def table(config: Path, name: str) -> list[dict[str, Any]]:
    cfg = load_config(config)
    destination = build_destination(cfg.destination("warehouse"))
    rows = destination.current_rows(model=table_model(name), recipient=owner(cfg)).to_pylist()
    key = TABLES[name][1]
    return sorted(({k: v for k, v in r.items() if not k.startswith("_incsync")} for r in rows),
                  key=lambda r: tuple(str(r[k]) for k in key))


def audit(instance: dg.DagsterInstance, config: Path) -> dict[str, Any]:
    result = build_definitions(config).resolve_job_def(AUDIT_JOB).execute_in_process(instance=instance)
    [mat] = result.asset_materializations_for_node(AUDIT_OP)
    return {k: v.value for k, v in mat.metadata.items()}


def at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


@pytest.mark.parametrize("kind", ["postgres", "delta"])
def test_the_transfer_log_of_real_transfers_exact_idempotent_and_incremental(
    spark, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from incsync_tests.support.jdbc import jdbc_config, pg_database

    with pg_database() as db, warehouse(kind, monkeypatch) as dest:
        db.execute("CREATE TABLE orders (id int PRIMARY KEY, organization_id text, amount int, updated_at timestamptz)")
        db.execute("INSERT INTO orders VALUES (1, 'org_1', 10, '2024-01-01 10:00:00.123456+00'), "
                   "(2, 'org_1', 20, '2024-01-01 11:00+00'), (3, 'org_2', 30, '2024-01-01 12:00+00')")
        config = jdbc_config(tmp_path, db, recipients=RECIPIENTS, model={"lookback_seconds": 0})
        doc = yaml.safe_load(config.read_text())
        doc["destinations"].append(dest)
        doc["tiers"] = [{"name": "gold", "frequency": "*/5 * * * *"}]
        doc["audit"] = {"destination": "warehouse", "lookback_seconds": 60}
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "globex").write_text("not a folder")

        ok = failed = run(config, dagster_instance, ["acme", "globex"], key=DB)  # one fan-out run: globex fails alone
        staged = latest_metadata(dagster_instance, ("db", "orders"))["staged_bytes"]
        assert not failed.success

        first = audit(dagster_instance, config)

        assert first == {"transfers_rows": 2, "transfers_new_rows": 2, "recipient_freshness_rows": 2,
                         "recipient_freshness_new_rows": 2, "recipient_destinations_rows": 2,
                         "recipient_destinations_new_rows": 2, **{k: first[k] for k in first if k.endswith("watermark")}}
        records = {r.dagster_run.run_id: r for r in dagster_instance.get_run_records()}
        ok_run, failed_run = records[ok.run_id], records[failed.run_id]
        acme = {"id": f"{ok.run_id}:orders:acme", "run_id": ok.run_id, "model": "orders", "recipient": "acme",
                "windows": 1, "first_window": "2024-01-01", "last_window": "2024-01-01", "status": "SUCCESS",
                "blamed": None, "blame_reason": None, "rows_transferred": 2, "delta_rows_transferred": 2,
                "high_watermark": datetime(2024, 1, 1, 11, tzinfo=UTC), "started_at": at(ok_run.start_time),
                "finished_at": at(ok_run.end_time), "staged_bytes": staged, "mode": None}
        globex = {"id": f"{failed.run_id}:orders:globex", "run_id": failed.run_id, "model": "orders",
                  "recipient": "globex", "windows": 0, "first_window": "2024-01-01", "last_window": "2024-01-01",
                  "status": "ERROR", "blamed": "recipient", "blame_reason": FILE_IN_THE_WAY.format("globex_delta"),
                  "rows_transferred": 0, "delta_rows_transferred": 0, "high_watermark": None,
                  "started_at": at(failed_run.start_time), "finished_at": at(failed_run.end_time), "staged_bytes": 0,
                  "mode": None}
        assert staged > 0
        assert table(config, "transfers") == sorted([acme, globex], key=lambda r: r["id"])
        [fresh_acme, fresh_globex] = table(config, "recipient_freshness")
        audited = fresh_acme["audited_at"]
        assert fresh_acme == {"model": "orders", "recipient": "acme",
                              "last_success_high_watermark": datetime(2024, 1, 1, 11, tzinfo=UTC),
                              "last_success_at": at(ok_run.end_time),
                              "lag_seconds": int((audited - datetime(2024, 1, 1, 11, tzinfo=UTC)).total_seconds()),
                              "audited_at": audited}
        assert fresh_globex == {"model": "orders", "recipient": "globex", "last_success_high_watermark": None,
                                "last_success_at": None, "lag_seconds": None, "audited_at": audited}
        snapshot = table(config, "recipient_destinations")
        assert [{k: v for k, v in r.items() if k != "snapshot_at"} for r in snapshot] == [
            {"recipient": "acme", "model": "orders", "destination": "acme_delta", "kind": "delta",
             "location": str(tmp_path / "out" / "acme"), "enabled": True, "tier": None, "products": None},
            {"recipient": "globex", "model": "orders", "destination": "globex_delta", "kind": "delta",
             "location": str(tmp_path / "out" / "globex"), "enabled": True, "tier": "gold", "products": None},
        ]
        assert {r["snapshot_at"] for r in snapshot} == {audited}

        again = audit(dagster_instance, config)  # the lookback re-reads both, nothing is new or doubled

        assert (again["transfers_new_rows"], again["recipient_destinations_rows"]) == (0, 0)
        assert table(config, "transfers") == sorted([acme, globex], key=lambda r: r["id"])
        assert [r["last_success_high_watermark"] for r in table(config, "recipient_freshness")] == [
            datetime(2024, 1, 1, 11, tzinfo=UTC), None]
        assert table(config, "recipient_destinations") == snapshot

        db.execute("INSERT INTO orders VALUES (4, 'org_1', 40, '2024-01-01 13:30:00.000007+00')")
        later = run(config, dagster_instance, ["acme"], key=DB)
        assert later.success

        third = audit(dagster_instance, config)

        assert third["transfers_new_rows"] == 1
        rows = table(config, "transfers")
        [new] = [r for r in rows if r["run_id"] == later.run_id]
        assert sorted(rows, key=lambda r: r["id"]) == sorted([acme, globex, new], key=lambda r: r["id"])
        assert (new["status"], new["rows_transferred"], new["delta_rows_transferred"], new["high_watermark"]) == (
            "SUCCESS", 3, 1, datetime(2024, 1, 1, 13, 30, 0, 7, tzinfo=UTC))
        assert table(config, "recipient_freshness")[0]["last_success_high_watermark"] == datetime(
            2024, 1, 1, 13, 30, 0, 7, tzinfo=UTC)

        drop_transfers(config)  # the log's table dropped: the next pass rebuilds it from the instance's history
        assert audit(dagster_instance, config)["transfers_rows"] == 3
        assert table(config, "transfers") == rows
        secrets = str(table(config, "recipient_destinations")) + str(rows)
        assert "postgresql://" not in secrets


KINDS = {"delta": {"kind": "delta", "path": "./warehouse"}, "duckdb": {"kind": "duckdb", "path": "./warehouse.duckdb"},
         "object_storage": {"kind": "object_storage", "path": "./warehouse"}}


@pytest.mark.parametrize("kind", list(KINDS))
def test_incsync_audit_prints_what_it_appended(spark, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch,
                                               kind: str) -> None:
    """A transfer whose source folder is missing (the provider's failure): logged on every kind of warehouse."""
    from incsync.cli.main import run_command

    config = lake_config(tmp_path)
    doc = yaml.safe_load(config.read_text())
    doc["destinations"].append({"name": "warehouse", **KINDS[kind]})
    doc["audit"] = {"destination": "warehouse"}
    config.write_text(yaml.safe_dump(doc))
    failed = run(config, dagster_instance, ["acme"])
    assert not failed.success
    assert os.environ["DAGSTER_HOME"] == str(tmp_path / "dagster_home")  # the fixture's instance: the CLI finds it
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_command(["audit", "-c", str(config)]) == 0
    assert [line.split(" high watermark ")[0] for line in out.getvalue().splitlines()] == [
        f"{t}: 1 row(s) written, 1 new," for t in TABLES]
    [row] = table(config, "transfers")
    assert (row["id"], row["status"], row["blamed"], row["windows"], row["first_window"], row["high_watermark"]) == (
        f"{failed.run_id}:orders:acme", "ERROR", "provider", 0, "2024-01-01", None)
    assert row["blame_reason"].startswith("source lake: ")
    assert [(r["recipient"], r["last_success_high_watermark"]) for r in table(config, "recipient_freshness")] == [("acme", None)]
    assert [(r["recipient"], r["kind"]) for r in table(config, "recipient_destinations")] == [("acme", "delta")]
    [mat] = dagster_instance.fetch_materializations(AUDIT_KEY, limit=5).records
    assert mat.asset_materialization.metadata["transfers_rows"].value == 1
    doc["recipients"].append({"id": "globex", "id_in_provider_system": "org_2", "destination": "acme_delta_2"})
    doc["destinations"].append({"name": "acme_delta_2", "kind": "delta", "path": "./out/globex"})
    config.write_text(yaml.safe_dump(doc))  # a new subscriber, no transfer: its pending freshness row, a new snapshot
    again = audit(dagster_instance, config)
    assert [again[f"{t}_new_rows"] for t in TABLES] == [0, 2, 2]
    assert [r["recipient"] for r in table(config, "recipient_freshness")] == ["acme", "globex"]


def test_a_pass_killed_between_its_tables_loses_nothing(spark, tmp_path: Path, dagster_instance) -> None:
    """SIGKILLed after `transfers` committed and before `recipient_freshness` did: the next pass reads from the
    freshness's own cursor, so the success the killed pass logged still reaches the freshness, and no row doubles."""
    import os
    import signal
    import subprocess
    import sys

    from incsync.core.crashpoints import CRASH_ENV
    from incsync_tests.support.lake import order, ts, write_table

    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1))])
    config = lake_config(tmp_path, model={"lookback_seconds": 0})
    doc = yaml.safe_load(config.read_text())
    doc["destinations"].append({"name": "warehouse", "kind": "delta", "path": "./warehouse"})
    doc["audit"] = {"destination": "warehouse", "lookback_seconds": 0}
    config.write_text(yaml.safe_dump(doc))
    assert run(config, dagster_instance, ["acme"]).success
    audit(dagster_instance, config)
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 5))])
    second = run(config, dagster_instance, ["acme"])
    assert second.success

    killed = subprocess.run(
        [sys.executable, "-c", "from incsync.cli.main import main; main()", "audit", "-c", str(config)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"), CRASH_ENV: "audit_after_transfers"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [r["run_id"] for r in table(config, "transfers")].count(second.run_id) == 1
    assert [r["last_success_high_watermark"] for r in table(config, "recipient_freshness")] == [ts(1, 1)]

    after = audit(dagster_instance, config)

    # re-read from the freshness's older cursor: the second run's row again (not new), its success now in the freshness
    assert (after["transfers_new_rows"], after["recipient_freshness_new_rows"]) == (0, 1)
    assert len(table(config, "transfers")) == 2
    assert [r["last_success_high_watermark"] for r in table(config, "recipient_freshness")] == [ts(1, 5)]


def test_the_destinations_snapshot_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL destination is its schema and its variable's name; the DSN's password never reaches a row."""
    from incsync.operations.audit_rows import destination_rows

    monkeypatch.setenv("GLOBEX_PG_DSN", "postgresql://incsync:s3cr3t-pw@db.example.com:5432/globex")
    config = lake_config(tmp_path, recipients=[
        {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
        {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_pg", "enabled": False}],
        destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
                      {"name": "globex_pg", "kind": "postgres", "dsn_env": "GLOBEX_PG_DSN", "schema": "globex"}])
    now = datetime(2026, 1, 2, tzinfo=UTC)
    rows, digest = destination_rows(load_config(config), at=now)
    assert [(r["recipient"], r["kind"], r["location"], r["enabled"]) for r in rows] == [
        ("acme", "delta", str(tmp_path / "out" / "acme"), True),
        ("globex", "postgres", "schema globex (DSN in $GLOBEX_PG_DSN)", False)]
    assert "s3cr3t" not in str(rows) and "example.com" not in str(rows)
    assert destination_rows(load_config(config), at=datetime(2026, 1, 3, tzinfo=UTC))[1] == digest  # time aside


def test_the_freshness_keeps_each_pairs_newest_success() -> None:
    """A replayed older window (lower HW), a failure and a success of another pair: only the newest success counts."""
    from incsync.core.bounds import to_micros
    from incsync.operations.audit_rows import freshness

    def row(recipient: str, status: str, hw: datetime | None, finished: datetime) -> dict[str, Any]:
        return {"model": "orders", "recipient": recipient, "status": status, "high_watermark": hw, "finished_at": finished}

    day = datetime(2024, 1, 2, tzinfo=UTC)
    before = {"orders|acme": [to_micros(day), to_micros(day)]}
    later = day.replace(hour=5)
    state = freshness(before, [row("acme", "SUCCESS", day.replace(day=1), later),  # a backfill of an older window
                               row("acme", "ERROR", None, later), row("globex", "SUCCESS", later, later),
                               row("acme", "SUCCESS", day, later)])  # the same HW again, later: when it was last confirmed
    assert state == {"orders|acme": [to_micros(day), to_micros(later)], "orders|globex": [to_micros(later), to_micros(later)]}
    assert before == {"orders|acme": [to_micros(day), to_micros(day)]}  # the previous state is not changed in place

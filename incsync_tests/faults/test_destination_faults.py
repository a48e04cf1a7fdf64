"""A PostgreSQL destination connection killed mid-COPY and mid-commit: nothing partial, retried or failed
cleanly, and the next run exact. A commit that landed although its connection was lost is never redone."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import yaml

from incsync.core.crashpoints import PAUSE_ENV, PAUSE_FILE_ENV
from incsync.destinations.postgres.destination import PostgresDestination
from incsync.errors import PublishError
from incsync_tests.faults.support import Killer, private_postgres
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

REPO = Path(__file__).resolve().parents[2]
DAY1 = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))]
DAY2 = [
    order(1, "org_1", ts(2, 5), status="paid", amount=9.5), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)),
    order(4, "org_1", ts(2, 6)), order(5, "org_2", ts(2, 7)),
]
ORG1_DAY2 = sorted((r for r in DAY2 if r["organization_id"] == "org_1"), key=lambda r: r["id"])


class Admin:
    """Another connection to the destination's database: the one that kills."""

    def __init__(self) -> None:
        self.dsn = os.environ[PG_DSN_ENV]

    def execute(self, query: str, params=None) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def sessions(self, where: str):
        return lambda: [r[0] for r in self.execute(
            f"SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND ({where})"
        )]

    def terminate(self, pid: int) -> None:
        self.execute("SELECT pg_terminate_backend(%s)", [pid])


def _setup(tmp_path: Path, attempts: int, backoff: float = 0.2) -> tuple[Path, Target]:
    write_table(tmp_path / "src", "orders", DAY1)
    file = lake_config(
        tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
        destinations=[destination_spec("postgres")],
    )
    doc = yaml.safe_load(file.read_text())
    doc["retries"] = {"attempts": attempts, "backoff_seconds": backoff}
    file.write_text(yaml.safe_dump(doc))
    arrow_transfer.run(file, "2024-01-01", scheduled=False)
    write_table(tmp_path / "src", "orders", DAY2)
    return file, Target(file)


def _next_run_is_exact(file: Path, target: Target) -> None:
    arrow_transfer.run(file, "2024-01-02", scheduled=True)
    assert target.rows() == ORG1_DAY2
    assert target.high_watermark() == ts(2, 6)
    assert list(Path(os.environ["INCSYNC_STAGING_DIR"]).iterdir()) == []


@pytest.mark.parametrize("attempts", [1, 3], ids=["fails-cleanly", "heals-by-retry"])
def test_a_destination_connection_killed_mid_copy(attempts: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env("postgres", monkeypatch):
        file, target = _setup(tmp_path, attempts)
        before_raw, before_state = target.raw_rows(), target.state()
        admin, marker = Admin(), tmp_path / "paused"
        proc = subprocess.Popen(
            [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(file), "2024-01-02", "--scheduled"],
            cwd=REPO,
            env={**os.environ, PAUSE_ENV: "mid_copy", PAUSE_FILE_ENV: str(marker)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        killed, deadline = [], time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if marker.exists():  # the COPY has sent rows and waits: kill its connection once, then let it go on
                if not killed:
                    killed = admin.sessions("query LIKE 'COPY%'")()
                    for pid in killed:
                        admin.terminate(pid)
                marker.unlink()
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=60)
        assert len(killed) == 1
        if attempts == 1:
            assert proc.returncode == 1 and "PublishError" in stderr and "nothing was committed" in stderr, stderr[-2000:]
            assert target.raw_rows() == before_raw and target.state() == before_state
        else:
            assert proc.returncode == 0, stderr[-2000:]
            assert "failed (connection terminated by an administrator" in stderr and "retry 1 of 2" in stderr
            assert target.rows() == ORG1_DAY2
        _next_run_is_exact(file, target)


def test_a_destination_server_restarted_mid_copy_heals_by_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with private_postgres() as server:
        monkeypatch.setenv(PG_DSN_ENV, server.dsn)
        file, target = _setup(tmp_path, attempts=5, backoff=0.5)  # waits 0.5, 1, 2, 4 s: the server is back by then
        marker = tmp_path / "paused"
        proc = subprocess.Popen(
            [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(file), "2024-01-02", "--scheduled"],
            cwd=REPO,
            env={**os.environ, PAUSE_ENV: "mid_copy", PAUSE_FILE_ENV: str(marker)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        restarted, deadline = False, time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if marker.exists():
                if not restarted:  # mid-COPY: the server shuts down (terminating the connection), then comes back
                    server.stop("fast")
                    marker.unlink()
                    server.start()
                    restarted = True
                else:
                    marker.unlink()
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=60)
        assert restarted and proc.returncode == 0, stderr[-2000:]
        assert "retry 1 of 4" in stderr
        assert target.rows() == ORG1_DAY2
        _next_run_is_exact(file, target)


SLOW_COMMIT = """
CREATE FUNCTION acme.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON acme._incsync_transfers DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION acme.slow_commit();
"""


@pytest.mark.parametrize("attempts", [1, 3], ids=["fails-cleanly", "heals-by-retry"])
def test_a_destination_connection_killed_mid_commit(
    attempts: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with destination_env("postgres", monkeypatch):
        file, target = _setup(tmp_path, attempts)
        before_raw, before_state = target.raw_rows(), target.state()
        admin = Admin()
        admin.execute(SLOW_COMMIT)  # the commit runs a deferred trigger (a recipient's own): it takes 1.5 s
        with caplog.at_level(logging.WARNING, logger="incsync.transfer.retries"), \
                Killer(admin.sessions("state = 'active' AND query = 'COMMIT'"), admin.terminate) as killer:
            if attempts == 1:
                with pytest.raises(PublishError, match="nothing was committed"):
                    arrow_transfer.run(file, "2024-01-02", scheduled=True)
            else:
                arrow_transfer.run(file, "2024-01-02", scheduled=True)
        assert len(killer.killed) == 1
        if attempts == 1:
            assert target.raw_rows() == before_raw and target.state() == before_state
        else:
            assert "retry 1 of 2" in caplog.text
            assert target.rows() == ORG1_DAY2
        admin.execute("DROP TRIGGER slow_commit ON acme._incsync_transfers")
        _next_run_is_exact(file, target)


class LostAck(PostgresDestination):
    """The real destination; its first publish commits, then its connection is lost before the answer."""

    lost = False

    def publish(self, **kwargs):
        metadata = super().publish(**kwargs)
        if not LostAck.lost:
            LostAck.lost = True
            raise PublishError("publish failed and nothing was committed: server closed the connection unexpectedly")
        return metadata


def test_a_commit_that_landed_before_its_connection_was_lost_is_not_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env("postgres", monkeypatch):
        file, target = _setup(tmp_path, 3)
        monkeypatch.setattr("incsync_tests.support.arrow_transfer.build_destination", lambda config: LostAck(config))
        outcome = arrow_transfer.run(file, "2024-01-02", scheduled=True)
        assert LostAck.lost
        assert outcome.destination_metadata == {"publish_attempts": 2}
        records = Admin().execute("SELECT transfer_id FROM acme._incsync_transfers ORDER BY seq")
        assert len(records) == 2 and records[-1][0] == outcome.record.transfer_id  # one commit for the day, not two
        assert target.rows() == ORG1_DAY2

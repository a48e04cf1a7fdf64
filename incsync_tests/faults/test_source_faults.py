"""A source connection killed in the middle of a read: retried and exact, or failed with nothing published."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync_tests.faults.support import Killer, pg_sessions, pg_terminate, transfer
from incsync_tests.support.jdbc import jdbc_config, maria_database, mariadb_cli, pg_database
from incsync_tests.support.lake import delta_rows, ts

ROWS = [(1, "org_1", "new", ts(1, 1)), (2, "org_1", "paid", ts(1, 2)), (3, "org_2", "new", ts(1, 3)), (4, "org_1", "new", ts(1, 4))]
EXPECTED = [(1, ts(1, 1)), (2, ts(1, 2)), (4, ts(1, 4))]
# The read sleeps once (a materialized CTE), long enough for the killer to find it.
PG_SLOW = "WITH s AS MATERIALIZED (SELECT pg_sleep(1)) SELECT o.* FROM orders o, s"
# Every try must be found and killed: on a loaded machine a one-second read can finish between two polls.
PG_SLOWER = PG_SLOW.replace("pg_sleep(1)", "pg_sleep(2)")
MARIA_SLOW = "SELECT o.* FROM orders o CROSS JOIN (SELECT SLEEP(1) AS z) s"
# Spark's JDBC read (its relation is aliased incsync_src), not incsync's own row-count probe nor Spark's
# schema probe (WHERE 1=0), which ends in milliseconds: killing it would count a kill that hit nothing.
PG_SPARK_READ = ("state = 'active' AND query LIKE '%pg_sleep%' AND query LIKE '%incsync_src%' "
                 "AND query NOT LIKE '%WHERE 1=0%'")


def _config(tmp_path: Path, db, source_query: str, attempts: int) -> Path:
    extra = {"last_modified_timezone": "UTC"} if db.vendor == "mariadb" else {}  # DATETIME holds no zone
    file = jdbc_config(tmp_path, db, model={"source_table": None, "source_query": source_query,
                                             "columns": ["id", "organization_id", "status", "updated_at"], **extra})
    doc = yaml.safe_load(file.read_text())
    doc["models"][0].pop("source_table")
    doc["retries"] = {"attempts": attempts, "backoff_seconds": 0.2}
    file.write_text(yaml.safe_dump(doc))
    return file


def _state(file: Path):
    config = load_config(file)
    recipient = config.recipient("acme")
    return build_destination(config.destination(recipient.destination)).read_state(model=config.model("orders"), recipient=recipient)


def _staging() -> Path:
    return Path(os.environ["INCSYNC_STAGING_DIR"])


def _seed_pg(db) -> None:
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, status text, updated_at timestamptz(6) NOT NULL)")
    for row in ROWS:
        db.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)", row)


def _seed_maria(db) -> None:
    values = ", ".join(f"({i}, '{org}', '{st}', '{lm:%Y-%m-%d %H:%M:%S.%f}')" for i, org, st, lm in ROWS)
    db.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, organization_id VARCHAR(20), status TEXT, updated_at DATETIME(6) NOT NULL);"
               f"INSERT INTO orders VALUES {values};")


def _maria_reads(db):
    def find() -> list[int]:
        out = mariadb_cli(f"SELECT id FROM information_schema.processlist WHERE db = '{db.name}' AND info LIKE '%SLEEP(1)%' "
                          "AND id <> CONNECTION_ID()")
        return [int(x) for x in out.split()]
    return find


def _maria_kill(session: int) -> None:
    mariadb_cli(f"KILL {session}")


@pytest.mark.parametrize("vendor", ["postgres", "mariadb"])
def test_a_source_connection_killed_mid_read_is_retried_and_the_transfer_is_exact(
    vendor: str, spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (pg_database() if vendor == "postgres" else maria_database()) as db:
        (_seed_pg if vendor == "postgres" else _seed_maria)(db)
        file = _config(tmp_path, db, PG_SLOW if vendor == "postgres" else MARIA_SLOW, attempts=3)
        find, kill = (pg_sessions(db, PG_SPARK_READ), pg_terminate(db)) if vendor == "postgres" else (_maria_reads(db), _maria_kill)
        with caplog.at_level(logging.WARNING, logger="incsync.transfer.retries"), Killer(find, kill, times=1) as killer:
            outcome = transfer(file, "2024-01-01", spark, staging_root=_staging())
        assert len(killer.killed) == 1
        retries = [r.getMessage() for r in caplog.records if "retry 1 of 2" in r.getMessage()]
        assert len(retries) == 1 and "read of source db for model orders, recipient acme failed" in retries[0], caplog.text
        assert (outcome.record.rows_transferred, outcome.record.high_watermark) == (3, ts(1, 4))
        assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == EXPECTED
        assert list(_staging().iterdir()) == []


def test_a_source_killed_on_every_try_fails_cleanly_and_the_next_run_is_exact(spark, tmp_path: Path) -> None:
    with pg_database() as db:
        _seed_pg(db)
        file = _config(tmp_path, db, PG_SLOWER, attempts=2)
        with Killer(pg_sessions(db, PG_SPARK_READ), pg_terminate(db), times=2) as killer, pytest.raises(Exception) as failed:
            transfer(file, "2024-01-01", spark, staging_root=_staging())
        assert (len(killer.killed), killer.errors) == (2, [])
        assert "terminating connection due to administrator command" in str(failed.value)
        assert not (tmp_path / "out" / "acme" / "orders").exists()  # nothing published, not even a table
        assert _state(file).last_transfer is None
        assert list(_staging().iterdir()) == []

        outcome = transfer(file, "2024-01-01", spark, staging_root=_staging())
        assert (outcome.record.rows_transferred, outcome.record.high_watermark) == (3, ts(1, 4))
        assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == EXPECTED
        assert list(_staging().iterdir()) == []

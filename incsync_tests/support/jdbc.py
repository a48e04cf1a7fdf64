"""Real PostgreSQL and MariaDB databases for JDBC source tests: each test gets its own, dropped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from incsync_tests.support.host import in_ci
from incsync_tests.support.lake import JAN1_EPOCH

HOST = "127.0.0.1"
PG_PORT = 5432
MARIADB_PORT = 3306
PG_USERS = ("postgres", "root")


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return True
    except OSError:
        return False


def require_server(name: str, port: int) -> None:
    """Skip when the server is absent; under CI=true fail instead."""
    if _reachable(port):
        return
    message = f"{name} is not reachable on {HOST}:{port}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: database tests must run)")
    pytest.skip(message)


def pg_user() -> str:
    import psycopg

    for user in PG_USERS:
        try:
            with psycopg.connect(host=HOST, port=PG_PORT, user=user, dbname="postgres", connect_timeout=5):
                return user
        except psycopg.OperationalError:
            continue
    pytest.fail(f"PostgreSQL on {HOST}:{PG_PORT} accepts none of the users {PG_USERS}")


class PgDatabase:
    """A throwaway PostgreSQL database."""

    vendor = "postgres"

    def __init__(self, name: str, user: str):
        self.name, self.user = name, user

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{HOST}:{PG_PORT}/{self.name}"

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(host=HOST, port=PG_PORT, user=self.user, dbname=self.name, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []


class MariaDatabase:
    """A throwaway MariaDB database, driven through the ``mariadb`` client."""

    vendor = "mariadb"

    def __init__(self, name: str):
        self.name = name

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:mariadb://{HOST}:{MARIADB_PORT}/{self.name}"

    def execute(self, sql: str, database: str | None = None) -> list[list[str]]:
        out = mariadb_cli(sql, database=self.name if database is None else database)
        return [line.split("\t") for line in out.splitlines()]


def mariadb_cli(sql: str, *, database: str = "") -> str:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        pytest.fail("the mariadb client is not installed (apt-get install mariadb-client)")
    args = [client, "-h", HOST, "-P", str(MARIADB_PORT), "-uroot", "--batch", "--skip-column-names"]
    result = subprocess.run([*args, *([database] if database else [])], input=sql, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"mariadb failed: {result.stderr.strip()}")
    return result.stdout


@contextmanager
def pg_database() -> Iterator[PgDatabase]:
    require_server("PostgreSQL", PG_PORT)
    import psycopg
    from psycopg import sql

    user = pg_user()
    name = f"incsync_t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(host=HOST, port=PG_PORT, user=user, dbname="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield PgDatabase(name, user)
    finally:
        from incsync.destinations.postgres.pool import close_pools

        close_pools()  # a destination's pooled connections to it go with the database; the next use opens others
        with psycopg.connect(host=HOST, port=PG_PORT, user=user, dbname="postgres", autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def maria_database() -> Iterator[MariaDatabase]:
    require_server("MariaDB", MARIADB_PORT)
    name = f"incsync_t_{uuid.uuid4().hex[:10]}"
    mariadb_cli(f"CREATE DATABASE `{name}`")
    try:
        yield MariaDatabase(name)
    finally:
        mariadb_cli(f"DROP DATABASE IF EXISTS `{name}`")


def jdbc_config(
    root: Path,
    db: PgDatabase | MariaDatabase,
    *,
    model: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    recipients: list[dict[str, Any]] | None = None,
) -> Path:
    """An incsync.yaml reading ``orders`` from ``db`` (source name ``db``) into Delta under ``root/out``."""
    recipients = recipients or [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"}]
    user = db.user if isinstance(db, PgDatabase) else "root"
    doc = {
        "sources": [{"name": "db", "vendor": db.vendor, "jdbc_url": db.jdbc_url, "user": user, **(source or {})}],
        "destinations": [{"name": r["destination"], "kind": "delta", "path": f"./out/{r['id']}"} for r in recipients],
        "models": [
            {
                "model_name": "orders",
                "source": "db",
                "source_table": "orders",
                "primary_key": ["id"],
                "last_modified_column": "updated_at",
                "organization_column": "organization_id",
                "max_transfer_time_window_seconds": 86400,
                "min_start_time_epoch": JAN1_EPOCH,
                **(model or {}),
            }
        ],
        "recipients": recipients,
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path

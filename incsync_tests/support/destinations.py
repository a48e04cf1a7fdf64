"""Helpers for the destination tests: a database per test, one destination spec per kind, readers, an Arrow source."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from incsync.config.load import load_config
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.sources import LakeSourceConfig
from incsync.core.bounds import Bounds
from incsync.destinations.registry import Destination, build_destination
from incsync.sources.base import Source

KINDS = ("delta", "postgres", "object_storage", "duckdb", "iceberg", "mariadb")
# The end-to-end matrix outside the conformance suite (Dagster runs, verify, deletes, schema changes, the
# vendor type round trips) runs these kinds in `make test-long` only, to keep `make test` within its 12
# minutes; the conformance suite and each kind's own test file run every kind in `make test`.
LONG_KINDS = ("iceberg", "mariadb")
MATRIX_KINDS = [pytest.param(k, marks=pytest.mark.slow) if k in LONG_KINDS else k for k in KINDS]
PG_DSN_ENV = "INCSYNC_TEST_PG_DSN"
ROLE_DSN_ENV = "INCSYNC_TEST_BLAME_DSN"  # the DSN of the pg_role fixture's destination (a recipient's role)
MARIADB_ENV = "INCSYNC_TEST_MARIADB_DATABASE"  # the test's prefix of MariaDB database names
PG_ADMIN_USERS = ("postgres", "root")
DEST = "acme_dest"


def _admin_connect():
    import psycopg

    last: Exception | None = None
    for user in PG_ADMIN_USERS:
        try:
            return psycopg.connect(f"postgresql://{user}@127.0.0.1:5432/postgres", autocommit=True, connect_timeout=3), user
        except psycopg.OperationalError as exc:
            last = exc
    raise last  # type: ignore[misc]


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh database for one test (its DSN), dropped afterwards; skipped without a server, unless in CI."""
    import psycopg

    from incsync_tests.support.host import in_ci

    try:
        admin, user = _admin_connect()
    except psycopg.OperationalError as exc:
        if in_ci():
            raise
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is not reachable: {exc}")
    name = f"incsync_t_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"postgresql://{user}@127.0.0.1:5432/{name}"
        finally:
            from incsync.destinations.postgres.pool import close_pool

            close_pool(f"postgresql://{user}@127.0.0.1:5432/{name}")  # its connections go with the database
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def mariadb_admin():
    """A root session on the machine's MariaDB (127.0.0.1:3306); skipped without a server, unless in CI."""
    import pymysql

    from incsync_tests.support.host import in_ci

    try:
        return pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True, connect_timeout=3)
    except pymysql.MySQLError as exc:
        if in_ci():
            raise
        pytest.skip(f"MariaDB at 127.0.0.1:3306 is not reachable: {exc}")


@contextmanager
def mariadb_databases() -> Iterator[str]:
    """A prefix for the test's MariaDB databases (``destination_spec`` derives one per folder); every
    database with it is dropped afterwards."""
    admin = mariadb_admin()
    prefix = f"incsync_t_{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        with admin.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE %s", [prefix + "%"])
            for (name,) in cur.fetchall():
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


def mariadb_database(folder: str = "./out/acme") -> str:
    """The database ``destination_spec("mariadb", folder=...)`` names in this test."""
    return f"{os.environ[MARIADB_ENV]}_{Path(folder).name}"


def destination_spec(kind: str, name: str = DEST, folder: str = "./out/acme") -> dict[str, Any]:
    if kind == "mariadb":
        return {"name": name, "kind": "mariadb", "user": "root", "database": mariadb_database(folder)}
    if kind == "postgres":
        return {"name": name, "kind": "postgres", "dsn_env": PG_DSN_ENV, "schema": "acme"}
    if kind == "duckdb":
        return {"name": name, "kind": "duckdb", "path": f"{folder}.duckdb"}
    return {"name": name, "kind": kind, "path": folder}


@contextmanager
def destination_env(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if kind == "mariadb":
        with mariadb_databases() as prefix:
            monkeypatch.setenv(MARIADB_ENV, prefix)
            yield
        return
    if kind != "postgres":
        yield
        return
    with postgres_database() as dsn:
        monkeypatch.setenv(PG_DSN_ENV, dsn)
        yield


class Target:
    """One recipient's destination as a reader sees it."""

    def __init__(self, config_path: Path, model: str = "orders", recipient: str = "acme"):
        self.config: IncsyncConfig = load_config(config_path)
        self.model: ModelConfig = self.config.model(model)
        self.recipient: RecipientConfig = self.config.recipient(recipient)
        self.destination: Destination = build_destination(self.config.destination(self.recipient.destination))

    @property
    def kind(self) -> str:
        return self.destination.kind

    def raw_rows(self) -> list[dict[str, Any]]:
        """Every row a reader sees (object storage: once per committed transfer that carried it)."""
        table = self.destination.read_rows(model=self.model, recipient=self.recipient)
        return sorted(table.to_pylist(), key=_row_key)

    def rows(self) -> list[dict[str, Any]]:
        """The destination's current rows: for append-only object storage, the newest version of each key."""
        rows = self.raw_rows()
        if self.kind != "object_storage":
            return rows
        lm = self.model.last_modified_column
        latest: dict[tuple, dict[str, Any]] = {}
        for row in rows:
            key = tuple(row[c] for c in self.model.primary_key)
            if key not in latest or row[lm] >= latest[key][lm]:
                latest[key] = row
        return sorted(latest.values(), key=_row_key)

    def state(self):
        return self.destination.read_state(model=self.model, recipient=self.recipient)

    def high_watermark(self) -> datetime | None:
        return self.state().high_watermark


def _row_key(row: dict[str, Any]) -> tuple:
    return (row.get("id"), str(row.get("updated_at")))


def source_rows(rows: list[dict[str, Any]], org: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    picked = [r for r in rows if r["organization_id"] == org]
    if columns is not None:
        picked = [{c: r.get(c) for c in columns} for r in picked]
    return sorted(picked, key=_row_key)


def duplicates(rows: list[dict[str, Any]]) -> Counter:
    counts = Counter(tuple(sorted((k, str(v)) for k, v in r.items())) for r in rows)
    return Counter({k: n - 1 for k, n in counts.items() if n > 1})


class ArrowLakeSource(Source):
    """The lake source read with pyarrow instead of Spark, so crash tests need no JVM per subprocess."""

    vendor = "lake"

    def __init__(self, config: LakeSourceConfig):
        self.config = config

    def read(self, spark: object, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds,
             rows_hint: int | None = None) -> pa.Table:
        assert model.source_table and model.organization_column and self.config.path
        data = ds.dataset(str(Path(self.config.path) / model.source_table), format="parquet")
        lm = ds.field(model.last_modified_column)
        table = data.to_table(
            columns=model.selected_columns,
            filter=(ds.field(model.organization_column) == recipient.id_in_provider_system)
            & (lm >= pa.scalar(bounds.lower, pa.timestamp("us", tz="UTC")))
            & (lm < pa.scalar(bounds.upper, pa.timestamp("us", tz="UTC"))),
        )
        return table.sort_by([(c, "ascending") for c in model.primary_key])


def max_last_modified(rows: list[dict[str, Any]]) -> datetime | None:
    values = [r["updated_at"] for r in rows]
    return max(values) if values else None


def env_with(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


__all__ = ["KINDS", "MATRIX_KINDS", "ArrowLakeSource", "Target", "destination_env", "destination_spec", "duplicates"]

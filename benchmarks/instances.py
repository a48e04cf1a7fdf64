"""The Dagster instances the benchmarks run on: ``sqlite`` and ``postgres``, otherwise the same file.

Both files come from incsync's generator (``incsync dagster-yaml``, ``operations/concurrency.py``) over
the same base, so run queue, run limits, run monitoring and daemon threads are identical:
- ``sqlite``: what ``incsync dagster-yaml --base dagster.yaml`` writes (Dagster's SQLite storage in
  ``DAGSTER_HOME`` with incsync's batching event log);
- ``postgres``: the same base with ``deploy/dagster.yaml``'s ``storage`` block (``postgres_url: {env:
  INCSYNC_DAGSTER_PG_URL}``, docs/deploy.md) over a database of its own, created here with a unique name
  (``incsync_bench_dagster_<pid>_<n>``) and dropped by ``close`` (on failure and Ctrl-C too).

deploy/dagster.yaml's own run settings (10 runs at once, Dagster's 5 s queue interval) are not taken:
with local Spark in every run the SQLite instance gets one run per CPU, and the comparison is of storage.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import yaml
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ("sqlite", "postgres")
URL_ENV = "INCSYNC_DAGSTER_PG_URL"  # deploy/dagster.yaml names it
DEPLOY_YAML = ROOT / "deploy" / "dagster.yaml"


def parse_instances(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(INSTANCES))
    if unknown or not kinds:
        raise SystemExit(f"--instance: {', '.join(unknown) or '(empty)'} is not one of {', '.join(INSTANCES)}")
    return kinds


def _without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def create_storage(home: Path, env: dict[str, str]) -> float:
    """Open the instance once, so its tables (SQLite files or PostgreSQL schema) exist before any timing,
    as a production instance's do before its first transfer; the seconds that took."""
    import dagster as dg

    started = time.monotonic()
    with environment(env), dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
    return time.monotonic() - started


class Instances:
    """Writes each benchmark instance's dagster.yaml and owns the PostgreSQL databases behind them."""

    def __init__(self, *, host: str, port: int, user: str, prefix: str | None = None):
        self.host, self.port, self.user = host, port, user
        self.prefix = prefix or f"incsync_bench_dagster_{os.getpid()}"
        self.databases: list[str] = []
        self._names = 0

    def next_name(self) -> str:
        """A database name no other benchmark process uses (its pid) and this one has not used."""
        self._names += 1
        return f"{self.prefix}_{self._names}"

    def url(self, db: str) -> str:
        return f"postgresql+psycopg2://{self.user}@{self.host}:{self.port}/{db}"

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(host=self.host, port=self.port, user=self.user, dbname="postgres", autocommit=True)

    def write(self, kind: str, *, config: Path, home: Path, base: Path, db: str | None = None, create: bool = True
              ) -> dict[str, str]:
        """``home/dagster.yaml`` for ``kind`` (with ``create``, its storage created too); the environment its
        processes need (the storage URL). For ``postgres`` the database ``db`` (default: the next unique
        name) is created unless it exists."""
        from incsync.config.load import load_config
        from incsync.operations.concurrency import dagster_yaml

        home.mkdir(parents=True, exist_ok=True)
        loaded = load_config(config)
        sqlite_text = dagster_yaml(loaded, base, dagster_home=home)
        if kind == "sqlite":
            (home / "dagster.yaml").write_text(sqlite_text)
            if create:
                print(f"  sqlite instance {home}: storage created in {create_storage(home, {}):.1f} s", flush=True)
            return {}
        db = db or self.next_name()
        with self._admin() as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        if db not in self.databases:
            self.databases.append(db)
        env = {URL_ENV: self.url(db)}
        base_doc = yaml.safe_load(base.read_text()) or {}
        base_doc["storage"] = yaml.safe_load(DEPLOY_YAML.read_text())["storage"]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=home, delete=False) as f:
            yaml.safe_dump(base_doc, f, sort_keys=False)
        try:
            with environment(env):  # the generator checks the URL's form when the variable is set
                text = dagster_yaml(loaded, Path(f.name), dagster_home=home)
        finally:
            os.unlink(f.name)
        storages = ("storage", "run_storage", "event_log_storage", "schedule_storage")  # one block, or incsync's event log
        same = _without(yaml.safe_load(text), *storages) == _without(yaml.safe_load(sqlite_text), *storages)
        assert same, f"the postgres instance's dagster.yaml differs from the sqlite one's beyond storage:\n{text}"
        (home / "dagster.yaml").write_text(text)
        if create:
            print(f"  postgres instance {db}: storage created in {create_storage(home, env):.1f} s", flush=True)
        return env

    def stats(self, db: str) -> dict[str, int]:
        """What Dagster stored in ``db``: runs, event log rows, materializations."""
        with psycopg.connect(host=self.host, port=self.port, user=self.user, dbname=db) as conn:
            runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            events = conn.execute("SELECT count(*) FROM event_logs").fetchone()[0]
            mats = conn.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'").fetchone()[0]
        return {"runs": runs, "event_logs": events, "materializations": mats}

    def drop(self, db: str) -> dict[str, int] | None:
        """Print what ``db`` holds, then drop it."""
        counts = None
        try:
            counts = self.stats(db)
            print(f"  dagster database {db}: {counts['runs']:,} runs, {counts['event_logs']:,} event_logs rows "
                  f"({counts['materializations']:,} materializations); dropping it", flush=True)
        except psycopg.Error as e:
            print(f"  dagster database {db}: no counts ({e.__class__.__name__}: {str(e).strip()[:200]}); dropping it", flush=True)
        with self._admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        if db in self.databases:
            self.databases.remove(db)
        return counts

    def keep(self, db: str) -> None:
        """Leave ``db`` in place at ``close`` (a benchmark's ``--keep``)."""
        if db in self.databases:
            self.databases.remove(db)
        print(f"  dagster database {db} kept", flush=True)

    def close(self) -> None:
        for db in list(self.databases):
            self.drop(db)

"""Benchmark: incsync as its README tells users to run it, beside dlt, on the same PostgreSQL data, into
Delta, PostgreSQL, DuckDB, Iceberg and MariaDB (``--destinations``; default delta,postgres).

One generated ``public.orders`` table holds every tenant: ``big`` (``--tenant-rows``, 500,000) and
``--c-tenants`` (200) skewed ones of ``--c-rows`` (5,000,000) in all (tenant k weighs 1/(k+1)).
Workloads:
  A  backfill of tenant ``big``
  B  1% of that tenant changed, then an incremental load (what a schedule tick runs)
  N  (``--no-change``) the same incremental again with nothing changed: the fixed cost of a transfer
  C  one backfill of every C tenant (``--c-tenants`` 0 leaves them out of the data)

Every incsync config holds every recipient of the data (``--config all``, the default: ``big`` and the C
tenants), at the product's defaults: the model's windows start ``--model-start`` (2025-01-01), daily
windows, one query per transfer, ``recipients_per_run`` 1,000.

Tools (``--tools`` for A/B/N, ``--c-tools`` for C); the first three are the headline, what the README
documents:
  worker          the README's worker: ``incsync worker -c incsync.yaml`` (local Spark inside the worker,
                  started and ready before the timing, one per tool x destination x repetition) and the
                  README's client, ``incsync transfer orders --recipient big`` with ``INCSYNC_WORKER`` set,
                  both run in the config's folder
  cold            ``incsync transfer ... -c incsync.yaml`` in a fresh process: what a cron entry runs (a JVM
                  per command); C: ONE command naming every C tenant (``--recipient`` repeated)
  auto            ``incsync transfer orders --recipient big -c incsync.yaml`` as a cron entry runs it, with the
                  product's default automatic worker (incsync.worker.auto): A, the first call, starts the worker
                  and waits for it; B and N are later calls handed to it. Peaks add the detached worker's and its
                  JVM's to the client's; the worker is stopped after the tool
  dlt             ``benchmarks/dlt_load.py``: sql_table, pyarrow backend, merge on the primary key,
                  incremental on updated_at, tenant filter pushed into the query, a fresh process per load;
                  dlt's own destination for each kind (filesystem delta / iceberg, postgres, duckdb,
                  sqlalchemy with mysql+pymysql)
  dlt1p           (C) every tenant's dlt pipeline in one process, one after the other
Options, each labelled as such in the output:
  worker-connect  the same worker and client, the config's ``spark.remote`` naming a Spark Connect server
                  the harness starts once and warms up with one transfer (README "Keeping Spark warm")
  warm            a fresh ``incsync transfer`` process against that Connect server
  warm1p          (C) every tenant's backfill in one incsync process against it (``incsync_loop.py``)
  floor           (A) the data movement alone, no tool: the tenant's rows by ``COPY`` into Arrow written by
                  delta-rs, or ``COPY`` out of the source piped into ``COPY`` into the destination

Instances (``--instance``, incsync's tools): each incsync config gets a fresh Dagster instance, ``sqlite``
or ``postgres`` (a database of its own, deploy/dagster.yaml's storage; ``instances.py``).

Per transfer it measures wall time and peak RSS: of the Python process that ran the transfer (VmHWM; a
worker's, reset before each transfer, or its client's if higher), of the JVM that served it (the cold
run's child JVM, the worker's local Spark, or the Connect server's; a resident JVM's VmHWM reset before
each transfer) and of the tree (client + worker + the worker's JVM; the Connect server is in none).
It prints each figure with its setup, config size and instance, then medians of ``--repeat`` repetitions
with ratios to dlt (and dlt1p); ``--json`` writes the same with the machine's state. Each repetition
loads into fresh destinations. Not part of `make test`; run with `make bench`:

    .venv/bin/python benchmarks/compare_dlt.py [--workloads A,B,C --c-tenants 200 --c-rows 5000000 --instance sqlite,postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instances import INSTANCES, Instances, parse_instances  # noqa: E402 - sibling script
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

from incsync.worker.client import WORKER_ENV_VAR  # noqa: E402 - standard library only

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BIG = "big"
DESTINATIONS = ("delta", "postgres", "duckdb", "iceberg", "mariadb")
MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root"}  # the MariaDB destination server, empty password


# What each tool's figures measure, as the output labels them: the headline tools run incsync as the
# README documents; the others are options.
SETUPS = {
    "worker": "worker local",      # `incsync worker -c incsync.yaml`: local Spark in the worker (README)
    "cold": "cold CLI",            # `incsync transfer` in a fresh process: a JVM per command
    "auto": "CLI auto-worker",     # `incsync transfer -c incsync.yaml` as a cron runs it, the product's default:
                                   # the first call starts a worker (incsync.worker.auto), later calls hand it theirs
    "dlt": "dlt",                  # a fresh dlt process per load
    "dlt1p": "dlt one process",    # every tenant's pipeline in one dlt process
    "worker-connect": "worker Connect",  # the worker, spark.remote naming the harness's warmed Connect server
    "warm": "CLI Connect",         # a fresh `incsync transfer` process against that server
    "warm1p": "one process Connect",  # incsync_loop.py against that server
    "floor": "floor, no tool",     # COPY/ADBC -> delta-rs or COPY: the data movement alone
}
CONNECT = ("worker-connect", "warm", "warm1p")  # the tools whose Spark is the harness's Connect server
WORKERS = ("worker", "worker-connect")
AB_TOOLS = ("dlt", "worker", "cold", "auto", "worker-connect", "warm", "floor")
C_TOOLS = ("dlt", "dlt1p", "worker", "cold", "worker-connect", "warm", "warm1p")


@dataclass
class Sample:
    workload: str
    destination: str
    tool: str
    setup: str  # SETUPS[tool]
    config_recipients: int  # recipients in incsync's config; 0 for dlt and the floor
    instance: str  # "–" for dlt and the floor
    repetition: int
    wall: float
    rows: int
    py_rss: int
    jvm_rss: int
    tree_rss: int


NO_INSTANCE = "–"


@dataclass
class Worker:
    """A running ``incsync worker``: its process, the socket it announced, the JVM of its local Spark."""

    process: subprocess.Popen[str]
    socket: Path
    jvm: int | None  # None when its Spark is the Connect server


def _status(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
    except (OSError, StopIteration, ValueError):
        return 0


def vm_hwm(pid: int) -> int:
    return _status(pid, "VmHWM:")


def descendants(root: int) -> list[tuple[int, str]]:
    """``root`` and every process below it, with its command name (``java`` for a JVM)."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    head, tail = f.read().rsplit(")", 1)
                children.setdefault(int(tail.split()[1]), []).append((int(entry), head.split("(", 1)[1]))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [p for p, _ in children.get(pid, [])]
    names = {p: n for kids in children.values() for p, n in kids}
    return [(p, names.get(p, "")) for p in found]


def tree_peaks(root: int) -> tuple[int, int]:
    """RSS of ``root``'s process tree now, and the highest VmHWM of a JVM in it (the embedded Spark's)."""
    tree = descendants(root)
    return sum(_status(p, "VmRSS:") for p, _ in tree), max((vm_hwm(p) for p, name in tree if name == "java"), default=0)


def jvm_of(pid: int) -> int:
    """The JVM among ``pid`` and its descendants (spark-submit execs java, so usually ``pid`` itself)."""
    return next((p for p, name in descendants(pid) if name == "java"), pid)


def measure(command: list[str], env: dict[str, str], *, cwd: Path | None = None) -> tuple[float, int, int, int, str]:
    """Run ``command``; wall seconds, peak RSS of the process itself, of a JVM it starts, of its tree; stdout."""
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks = {"py": 0, "jvm": 0, "tree": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks["py"] = max(peaks["py"], vm_hwm(process.pid))
            tree, jvm = tree_peaks(process.pid)
            peaks["tree"], peaks["jvm"] = max(peaks["tree"], tree), max(peaks["jvm"], jvm)
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed ({process.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    return wall, peaks["py"], peaks["jvm"], max(peaks["tree"], peaks["py"]), out


def reset_peak_rss(pid: int) -> None:
    """Start VmHWM afresh (Linux clear_refs 5), so a resident process's peak is per transfer."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def mariadb(**kwargs: object):  # -> pymysql.Connection (imported only when a MariaDB destination runs)
    import pymysql

    return pymysql.connect(**MARIADB, **kwargs)


def stop(worker: Worker | None) -> None:
    if worker is not None:
        worker.process.terminate()
        worker.process.wait(timeout=60)


def generate(conn: psycopg.Connection, *, tenant_rows: int, c_tenants: int, c_rows: int, start: datetime, end: datetime) -> dict[str, int]:
    """``orders``: tenant ``big`` and ``c_000..`` (skewed), updated_at spread over [start, end)."""
    conn.execute(
        """CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, status text,
           amount numeric(12,2), payload jsonb, updated_at timestamptz(6) NOT NULL)"""
    )
    sizes = {BIG: tenant_rows}
    weights = [1 / (k + 1) for k in range(c_tenants)]
    counts = [max(1, int(c_rows * w / sum(weights))) for w in weights]
    if counts:
        counts[0] += c_rows - sum(counts)
    sizes.update({f"c_{k:03d}": c for k, c in enumerate(counts)})
    span = int((end - start).total_seconds())
    acc = 0
    with conn.cursor() as cur:
        for tenant, n in sizes.items():
            cur.execute(
                """INSERT INTO orders
                   SELECT g, %s, (ARRAY['new','paid','shipped'])[1 + g %% 3], (g %% 10000) / 100.0,
                          jsonb_build_object('n', g, 'tag', 'x' || (g %% 7)),
                          %s::timestamptz + ((g * 7919) %% %s) * interval '1 second' + (g %% 999983) * interval '1 microsecond'
                   FROM generate_series(%s::bigint, %s::bigint) g""",
                (tenant, start, span - 1, acc + 1, acc + n),
            )
            acc += n
    conn.execute("CREATE INDEX orders_tenant_lm ON orders (organization_id, updated_at)")
    conn.execute("VACUUM ANALYZE orders")
    return sizes


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, user: str, source_db: str, dest_db: str, start: datetime,
                 instances: Instances, sizes: dict[str, int]):
        self.args, self.work, self.user = args, work, user
        self.source_db, self.dest_db, self.start = source_db, dest_db, start
        self.instances = instances
        self.sizes = sizes  # every tenant of the data and its rows: the recipients of a config holding all
        self.instance_env: dict[Path, dict[str, str]] = {}  # config -> the storage URL of its postgres instance
        self.instance_db: dict[Path, str] = {}
        self.remote: set[Path] = set()  # configs whose Spark is the Connect server
        self.auto: set[Path] = set()  # configs whose calls use the automatic worker (the auto tool)
        self.server_jvm: int | None = None
        self.samples: list[Sample] = []
        self.data_end = start
        self.rounds = 0
        self.last_stamp = start
        self.maria_names: list[str] = []  # MariaDB databases start with one of these (incsync's and dlt's)

    def dsn(self, db: str) -> str:
        return f"postgresql://{self.user}@{HOST}:{PORT}/{db}"

    # --- incsync -------------------------------------------------------------------------------------
    def config_recipients(self, transferred: list[str]) -> list[str]:
        """The recipients a tool's config holds: every tenant of the data (``--config all``, what a user's
        config holds), or only those it transfers."""
        return list(self.sizes) if self.args.config == "all" else transferred

    def incsync_config(self, name: str, destination: str, recipients: list[str], *, connect: bool, instance: str | None) -> Path:
        """``<work>/<name>/incsync.yaml`` at the product's defaults, and its Dagster instance in ``.dagster``
        beside it, the instance's default place (None: the one incsync writes on first use)."""
        folder = self.work / name
        folder.mkdir(parents=True)
        self.maria_names += [name] if destination == "mariadb" else []
        destinations, entries = [], []
        for r in recipients:
            # Each kind at its defaults: a recipient's own table folder, schema, file, warehouse or database.
            if destination == "delta":
                destinations.append({"name": f"d_{r}", "kind": "delta", "path": str(folder / "out" / r)})
            elif destination == "duckdb":
                destinations.append({"name": f"d_{r}", "kind": "duckdb", "path": str(folder / "out" / f"{r}.duckdb")})
            elif destination == "iceberg":  # the default SQLite catalog, <path>/catalog.db
                destinations.append({"name": f"d_{r}", "kind": "iceberg", "path": str(folder / "out" / r)})
            elif destination == "mariadb":
                destinations.append({"name": f"d_{r}", "kind": "mariadb", **MARIADB, "database": f"{name}_{r}"})
            else:
                destinations.append({"name": f"d_{r}", "kind": "postgres", "dsn_env": "BENCH_DEST_DSN", "schema": f"{name}_{r}"})
            entries.append({"id": r, "id_in_provider_system": r, "destination": f"d_{r}"})
        source = {"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{self.source_db}",
                  "user": self.user}
        if self.args.queries != 1:  # the product's default is one query per transfer
            source["max_concurrent_queries_per_transfer"] = self.args.queries
        config = {
            "sources": [source],
            "destinations": destinations,
            # Daily windows, as `incsync init` writes them (the field's default too).
            "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                        "last_modified_column": "updated_at", "organization_column": "organization_id",
                        "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(self.start.timestamp())}],
            "recipients": entries,
        }
        if self.args.spark:  # a trial of Spark settings: labelled by the command line that ran it
            config["spark"] = dict(kv.split("=", 1) for kv in self.args.spark)
        if connect:
            config["spark"] = {"spark.remote": f"sc://127.0.0.1:{self.args.port}"}
        path = folder / "incsync.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        if connect:
            self.remote.add(path)
        if instance is not None:
            db = self.instances.next_name() if instance == "postgres" else None
            self.instance_env[path] = self.instances.write(instance, config=path, home=folder / ".dagster",
                                                           base=ROOT / "dagster.yaml", db=db)
            if db:
                self.instance_db[path] = db
        return path

    def auto_dir(self, config: Path) -> Path:
        folder = config.parent / "run"  # XDG_RUNTIME_DIR: the worker's files go under incsync/ in it
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder

    def auto_worker(self, config: Path) -> tuple[int, int | None] | None:
        """The automatic worker of ``config`` (its pid, its JVM's) when one runs."""
        for pid_file in (self.auto_dir(config) / "incsync").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                if Path(f"/proc/{pid}").exists():
                    jvm = jvm_of(pid)
                    return pid, (jvm if jvm != pid else None)
        return None

    def stop_auto(self, config: Path | None) -> None:
        """End every automatic worker of the config (its idle exit would take minutes) and their JVMs: a call
        whose key differs (incsync's files edited between two calls) starts a worker of its own."""
        for _ in range(8):  # a handful at most; a process that outlives SIGKILL is left to its idle exit
            if config not in self.auto or not (automatic := self.auto_worker(config)):
                return
            os.kill(automatic[0], signal.SIGTERM)
            deadline = time.monotonic() + 60
            while Path(f"/proc/{automatic[0]}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            for pid in automatic:
                if pid and Path(f"/proc/{pid}").exists():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def done_with(self, config: Path | None) -> None:
        """Drop the config's PostgreSQL instance database, once it has said what Dagster stored in it."""
        if config in self.instance_db:
            self.instances.drop(self.instance_db.pop(config))

    def incsync_env(self, config: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("INCSYNC_CONFIG", "INCSYNC_WORKER", "XDG_RUNTIME_DIR")}
        # INCSYNC_AUTO_WORKER=0: a cold CLI is one process per transfer, not a client of the worker it would
        # start; the auto tool's configs keep the default, their workers' files in the config's folder.
        auto = {"XDG_RUNTIME_DIR": str(self.auto_dir(config))} if config in self.auto else {"INCSYNC_AUTO_WORKER": "0"}
        return {**env, **auto, "DAGSTER_HOME": str(config.parent / ".dagster"),
                "INCSYNC_STAGING_DIR": str(config.parent / "staging"),
                "BENCH_DEST_DSN": self.dsn(self.dest_db), **self.instance_env.get(config, {})}

    def incsync(self, config: Path, recipients: list[str] | None, *, backfill: bool, worker: Worker | None = None,
                command: list[str] | None = None) -> tuple[float, int, int, int, int]:
        """One ``incsync transfer orders`` of ``recipients`` (None: every recipient of the config), in a fresh
        process or, as the README shows it, through ``worker``: the client run in the config's folder with
        ``INCSYNC_WORKER`` set. ``command`` runs instead (``incsync_loop.py``). Wall seconds, rows, peaks of
        Python, the serving JVM and the tree."""
        env, cwd = self.incsync_env(config), None
        if command is None:
            who = [a for r in recipients or () for a in ("--recipient", r)]
            command = [str(BIN / "incsync"), "transfer", "orders", *who, *(["--backfill"] if backfill else [])]
            if worker is None:
                command += ["-c", str(config)]
            else:
                env[WORKER_ENV_VAR], cwd = str(worker.socket), config.parent
        # Resident processes' peaks start afresh (Linux clear_refs): their earlier transfers and warm-up stay
        # out, their resident memory not.
        automatic = self.auto_worker(config) if config in self.auto else None  # None too before the first call
        resident = [p for p in (worker and worker.process.pid, worker and worker.jvm,
                                self.server_jvm if config in self.remote else None, *(automatic or ())) if p]
        for pid in resident:
            reset_peak_rss(pid)
        wall, py, jvm, tree, out = measure(command, env, cwd=cwd)
        if config in self.auto and (automatic := self.auto_worker(config)):  # the detached worker did the work
            auto_py, auto_jvm = vm_hwm(automatic[0]), vm_hwm(automatic[1]) if automatic[1] else 0
            py, jvm, tree = max(py, auto_py), auto_jvm or jvm, tree + auto_py + auto_jvm
        rows = sum(int(n) for n in re.findall(r"(?<!_)rows_transferred=(\d+)", out))
        if worker is not None:  # the work happens in the worker: its peaks count, beside the client's
            worker_py = vm_hwm(worker.process.pid)
            worker_jvm = vm_hwm(worker.jvm) if worker.jvm else 0
            py, tree = max(py, worker_py), tree + worker_py + worker_jvm
            jvm = worker_jvm or jvm
        if config in self.remote and self.server_jvm:
            jvm = vm_hwm(self.server_jvm)
        return wall, rows, py, jvm, tree

    def start_worker(self, config: Path) -> Worker:
        """``incsync worker -c incsync.yaml`` in the config's folder, as the README starts it (its default
        socket beside the file), ready (its Spark started or connected) before any timing starts."""
        process = subprocess.Popen([str(BIN / "incsync"), "worker", "-c", config.name], cwd=config.parent,
                                   env=self.incsync_env(config), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        started = time.monotonic()
        for line in process.stdout:
            if line.strip().startswith(f"export {WORKER_ENV_VAR}="):
                threading.Thread(target=process.stdout.read, daemon=True).start()  # keep draining its output
                socket_path = Path(line.strip().split("=", 1)[1])
                java = [p for p, name in descendants(process.pid) if name == "java"]
                worker = Worker(process, socket_path, None if config in self.remote else (java[0] if java else None))
                jvm = f", its JVM {vm_hwm(worker.jvm) / 2**20:,.0f} MB" if worker.jvm else ""
                print(f"  worker ready in {time.monotonic() - started:.1f} s, resident before any transfer: "
                      f"{vm_hwm(process.pid) / 2**20:,.0f} MB{jvm}", flush=True)
                return worker
        raise RuntimeError(f"incsync worker for {config} exited with {process.wait()} before it was ready")

    def floor(self, name: str, destination: str, tenant: str) -> tuple[float, int, int, int, int]:
        """``floor.py``: the tenant's rows moved by COPY/ADBC into delta-rs or PostgreSQL, no tool; its wall
        is the movement alone (connect to commit), its Python start-up left out."""
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        target = (["--delta-path", str(folder / "out" / tenant)] if destination == "delta"
                  else ["--dest-dsn", self.dsn(self.dest_db), "--schema", f"{name}_{tenant}"])
        command = [str(BIN / "python"), str(ROOT / "benchmarks" / "floor.py"), "--source-dsn", self.dsn(self.source_db),
                   "--tenant", tenant, *target]
        _, py, jvm, tree, out = measure(command, dict(os.environ))
        moved = float(re.search(r"seconds=([0-9.]+)", out).group(1))
        return moved, int(re.search(r"rows=(\d+)", out).group(1)), py, jvm, tree

    # --- dlt -----------------------------------------------------------------------------------------
    def dlt(self, name: str, destination: str, tenant: str | list[str]) -> tuple[float, int, int, int, int]:
        """One dlt process: one tenant, or (a list) each tenant's pipeline in turn in the same process."""
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        tenants = [tenant] if isinstance(tenant, str) else tenant
        datasets = ["--dataset", f"{name}_{tenant}"] if isinstance(tenant, str) else ["--dataset-prefix", name]
        command = [str(BIN / "python"), str(ROOT / "benchmarks" / "dlt_load.py"), "--source-dsn", self.dsn(self.source_db),
                   *(a for t in tenants for a in ("--tenant", t)), "--destination", destination, *datasets,
                   "--pipelines-dir", str(folder / "pipelines")]
        # dlt insists on a password; the server's trust authentication ignores it.
        dest_dsn = self.dsn(self.dest_db).replace(f"//{self.user}@", f"//{self.user}:unused@")
        if destination == "mariadb":
            self.maria_names.append(name)
            dest_dsn = f"mysql+pymysql://{MARIADB['user']}@{MARIADB['host']}:{MARIADB['port']}/{self.dest_db}"
        command += ["--delta-path", str(folder / "out")] if destination in ("delta", "duckdb", "iceberg") else ["--dest-dsn", dest_dsn]
        env = {**os.environ, "DLT_DATA_DIR": str(folder / "data")}
        wall, py, jvm, tree, out = measure(command, env)
        return wall, sum(int(n) for n in re.findall(r"rows=(\d+)", out)), py, jvm, tree

    # --- checks and changes --------------------------------------------------------------------------
    def landed(self, tool: str, name: str, destination: str, tenant: str) -> int:
        """Rows in the tenant's table now: dlt's dataset ``<name>_<tenant>``, incsync's recipient ``tenant``."""
        dlt = tool.startswith("dlt")
        out = self.work / name / "out"
        if destination == "delta":
            from deltalake import DeltaTable

            path = out / (f"{name}_{tenant}/orders" if dlt else f"{tenant}/orders")
            return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()
        if destination == "duckdb":
            import duckdb

            file, table = (out / f"{name}_{tenant}" / "dlt.duckdb", f'"{name}_{tenant}".orders') if dlt else (out / f"{tenant}.duckdb", "main.orders")
            with duckdb.connect(str(file), read_only=True) as con:
                return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if destination == "iceberg":
            if dlt:  # dlt keeps no catalog on disk: the table's newest metadata file
                from pyiceberg.table import StaticTable

                newest = max((out / f"{name}_{tenant}" / "orders" / "metadata").glob("*.metadata.json"), key=lambda f: f.stat().st_mtime)
                table = StaticTable.from_metadata(str(newest))
            else:
                from incsync.config.destinations import IcebergDestinationConfig
                from incsync.destinations.iceberg.catalog import open_catalog

                config = IcebergDestinationConfig(name=f"d_{tenant}", kind="iceberg", path=str(out / tenant))
                table = open_catalog(config).load_table(f"{config.namespace}.orders")
            return table.scan().to_arrow().num_rows
        if destination == "mariadb":
            with mariadb(database=f"{name}_{tenant}") as conn, conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM orders")
                return cur.fetchone()[0]
        with psycopg.connect(self.dsn(self.dest_db)) as conn:
            return conn.execute(sql.SQL("SELECT count(*) FROM {}.orders").format(sql.Identifier(f"{name}_{tenant}"))).fetchone()[0]

    def change(self, tenant: str, fraction: float, tenant_rows: int) -> int:
        """Change ``fraction`` of the tenant's rows, dated two seconds ago (after the previous round). The
        previous round's rows sit at the HW, so incsync's 30 s lookback reads them again: its B moves about
        twice the rows. Never dated ahead of the clock: a row from the future is read again by every transfer
        until its time comes (docs/design.md, the HW never passes the extraction's start), so rounds a
        minute apart from the data's end, which ran ahead of the clock after ~10 rounds, made incsync's B
        move 5,000 more rows a round (60,000 by the last) where dlt's moved 5,000."""
        n = max(1, int(tenant_rows * fraction))
        self.rounds += 1
        stamp = max(datetime.now(timezone.utc) - timedelta(seconds=2), self.last_stamp + timedelta(seconds=1))
        self.last_stamp = stamp
        with psycopg.connect(self.dsn(self.source_db), autocommit=True) as conn:
            conn.execute(
                """UPDATE orders SET status = 'changed', amount = amount + 1,
                          updated_at = %s::timestamptz + (id %% 1000) * interval '1 millisecond'
                   WHERE id IN (SELECT id FROM orders WHERE organization_id = %s ORDER BY id OFFSET %s LIMIT %s)""",
                (stamp, tenant, (self.rounds * n) % max(1, tenant_rows - n), n),
            )
        return n

    def record(self, workload: str, destination: str, tool: str, instance: str, rep: int,
               result: tuple[float, int, int, int, int], *, cfg: int = 0) -> None:
        wall, rows, py, jvm, tree = result
        self.samples.append(Sample(workload, destination, tool, SETUPS[tool], cfg, instance, rep, wall, rows, py, jvm, tree))
        where = f"cfg {cfg}, {instance} instance" if cfg else "–"
        print(f"  {workload} {destination:<8} {SETUPS[tool]:<15} {where:<25} rep {rep}: {wall:6.2f} s  {rows:>9,} rows  "
              f"py {py / 2**20:,.0f} MB  JVM {jvm / 2**20:,.0f} MB  tree {tree / 2**20:,.0f} MB", flush=True)

    # --- workloads -----------------------------------------------------------------------------------
    def a_and_b(self, destination: str, tool: str, instance: str, rep: int, tenant_rows: int) -> None:
        name = f"{tool.replace('-', '')[:8]}_{destination[:2]}{'' if instance == NO_INSTANCE else '_' + instance[:2]}_{rep}_{uuid.uuid4().hex[:4]}"
        if tool == "floor":  # A only: what B's merge would cost without a tool is not this harness's question
            self.record("A", destination, tool, instance, rep, self.floor(name, destination, BIG))
            return
        worker = config = None
        cfg = 0
        if tool == "dlt":
            run = lambda backfill: self.dlt(name, destination, BIG)  # noqa: E731 - dlt's state decides
        try:
            if tool != "dlt":
                recipients = self.config_recipients([BIG])
                cfg = len(recipients)
                config = self.incsync_config(name, destination, recipients, connect=tool in CONNECT, instance=instance)
                if tool == "auto":
                    self.auto.add(config)
                worker = self.start_worker(config) if tool in WORKERS else None
                run = lambda backfill: self.incsync(config, [BIG], backfill=backfill, worker=worker)  # noqa: E731
            self.record("A", destination, tool, instance, rep, run(True), cfg=cfg)
            landed = self.landed(tool, name, destination, BIG)
            assert landed == tenant_rows, f"{tool} {destination}: destination holds {landed} rows, the tenant has {tenant_rows}"
            changed = self.change(BIG, 0.01, tenant_rows)
            result = run(False)
            assert result[1] >= changed, f"{tool} {destination}: incremental moved {result[1]} rows, {changed} changed"
            self.record("B", destination, tool, instance, rep, result, cfg=cfg)
            if self.args.no_change:  # N: the same incremental again, nothing changed since
                self.record("N", destination, tool, instance, rep, run(False), cfg=cfg)
        finally:
            stop(worker)
            self.stop_auto(config)
            self.done_with(config)

    def c(self, destination: str, tool: str, instance: str, rep: int, sizes: dict[str, int]) -> None:
        name = f"{tool.replace('-', '')[:8]}_c{destination[:2]}{'' if instance == NO_INSTANCE else '_' + instance[:2]}_{rep}_{uuid.uuid4().hex[:4]}"
        tenants = [t for t in sizes if t != BIG]
        if tool == "dlt1p":  # every tenant's pipeline in one dlt process
            self.record("C", destination, tool, instance, rep, self.dlt(name, destination, tenants))
            self.check_c(tool, name, destination, sizes)
            return
        config = worker = None
        cfg = 0
        try:
            if tool != "dlt":
                recipients = self.config_recipients(tenants)
                cfg = len(recipients)
                config = self.incsync_config(name, destination, recipients, connect=tool in CONNECT, instance=instance)
            if tool == "warm1p":  # every tenant in one process: no Python start-up per transfer
                command = [str(BIN / "python"), str(ROOT / "benchmarks" / "incsync_loop.py"), "-c", str(config), "orders", *tenants]
                result = self.incsync(config, tenants, backfill=True, command=command)
            elif tool in (*WORKERS, "cold"):  # ONE `incsync transfer --backfill` naming every C tenant: runs of recipients_per_run
                worker = self.start_worker(config) if tool in WORKERS else None
                result = self.incsync(config, tenants, backfill=True, worker=worker)
            else:  # dlt, warm: a fresh process per tenant
                wall = rows = py = jvm = tree = 0
                for tenant in tenants:
                    w, r, p, j, t = (self.dlt(name, destination, tenant) if tool == "dlt"
                                     else self.incsync(config, [tenant], backfill=True))
                    wall, rows, py, jvm, tree = wall + w, rows + r, max(py, p), max(jvm, j), max(tree, t)
                result = (wall, rows, py, jvm, tree)
            self.record("C", destination, tool, instance, rep, result, cfg=cfg)
            self.check_c(tool, name, destination, sizes)
        finally:
            stop(worker)
            self.done_with(config)

    def check_c(self, tool: str, name: str, destination: str, sizes: dict[str, int]) -> None:
        """After the timing: every C tenant's table holds exactly that tenant's rows."""
        wrong = {t: (n, got) for t, n in sizes.items() if t != BIG and (got := self.landed(tool, name, destination, t)) != n}
        assert not wrong, f"{tool} {destination} C: tenant -> (rows, landed) {wrong}"

    def drop_mariadb(self) -> None:
        """Drop every MariaDB database this run made: dlt's URL's, incsync's per recipient, dlt's per dataset
        (and its _staging), even when the run stopped before its first load."""
        with mariadb(autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SHOW DATABASES")
            for (db,) in cur.fetchall():
                if any(db.startswith(f"{n}_") for n in self.maria_names) or db == self.dest_db:
                    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def settle(admin: psycopg.Connection) -> None:
    """Write the previous tool's dirty pages out before the next tool is timed: without it, the tool that
    follows dlt's (or incsync's) large load pays for that load's checkpoint (PostgreSQL-destination figures
    varied 82-191 s by order alone, session 10)."""
    admin.execute("CHECKPOINT")


def summarize(samples: list[Sample]) -> list[str]:
    """The results table, one line per (workload, destination, tool, instance), with ratios to dlt."""
    groups: dict[tuple[str, str, str, str], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.workload, s.destination, s.tool, s.instance), []).append(s)
    medians = {k: statistics.median(s.wall for s in v) for k, v in groups.items()}
    lines = ["| workload | destination | setup | cfg | instance | n | wall s, median (min–max) | rows | rows/s | py RSS MB "
             "| JVM RSS MB | tree RSS MB | wall ÷ dlt |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {"dlt": 0, "dlt1p": 1, "floor": 2, "worker": 3, "cold": 4, "worker-connect": 5, "warm": 6, "warm1p": 7}
    for key in sorted(groups, key=lambda k: (k[0], k[1], order.get(k[2], 9), INSTANCES.index(k[3]) if k[3] in INSTANCES else -1)):
        runs, wall = groups[key], medians[key]
        walls = sorted(s.wall for s in runs)
        rows = int(statistics.median(s.rows for s in runs))
        py = statistics.median(s.py_rss for s in runs) / 2**20
        jvm = statistics.median(s.jvm_rss for s in runs) / 2**20
        tree = statistics.median(s.tree_rss for s in runs) / 2**20
        peer = medians.get((key[0], key[1], "dlt", NO_INSTANCE))
        ratio = "–" if key[2].startswith("dlt") or peer is None else f"{wall / peer:.2f}"
        peer_1p = medians.get((key[0], key[1], "dlt1p", NO_INSTANCE))
        if peer_1p and not key[2].startswith("dlt"):
            ratio += f" ({wall / peer_1p:.2f} of dlt1p)"
        no_jvm = key[2].startswith("dlt") or key[2] == "floor"
        lines.append(f"| {key[0]} | {key[1]} | {runs[0].setup} | {runs[0].config_recipients or '–'} | {key[3]} | {len(runs)} | "
                     f"{wall:.2f} ({walls[0]:.2f}–{walls[-1]:.2f}) | {rows:,} | {rows / wall:,.0f} | {py:,.0f} | "
                     f"{'–' if no_jvm else f'{jvm:,.0f}'} | {tree:,.0f} | {ratio} |")
    return lines


def machine(loads: list[tuple[float, float, float]]) -> dict[str, object]:
    """What the figures ran on: host, cores, the load averages seen, the commit measured."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False).stdout.strip()

    return {"host": os.uname().nodename, "cores": os.cpu_count(), "load_averages": loads,
            "commit": git("rev-parse", "--short", "HEAD") + (" (dirty)" if git("status", "--porcelain", "--untracked-files=no") else "")}


def parse_tools(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    tools = [t.strip() for t in text.split(",") if t.strip()]
    if unknown := [t for t in tools if t not in allowed]:
        sys.exit(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return tools


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenant-rows", type=int, default=500_000, help="workload A/B tenant size")
    parser.add_argument("--c-tenants", type=int, default=200,
                        help="the many small tenants, in the data (and so in every --config all) whatever --workloads says")
    parser.add_argument("--c-rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--c-repeat", type=int, default=1, help="repetitions of workload C")
    parser.add_argument("--workloads", default="A,C", help="A (A then B; B names the same), C")
    parser.add_argument("--destinations", default="delta,postgres", help=f"comma-separated: {', '.join(DESTINATIONS)}")
    parser.add_argument("--tools", default="dlt,worker,cold,auto", help=f"tools for A/B/N: {', '.join(AB_TOOLS)}")
    parser.add_argument("--c-tools", default="dlt,dlt1p,worker,cold", help=f"tools for workload C: {', '.join(C_TOOLS)}")
    parser.add_argument("--config", choices=("all", "transferred"), default="all",
                        help="incsync's configs hold every recipient of the data (a user's config), or only the transferred")
    parser.add_argument("--no-change", action="store_true", help="after B, one more incremental with nothing changed (N)")
    parser.add_argument("--queries", type=int, default=1,
                        help="incsync's max_concurrent_queries_per_transfer (default: the product's default, 1)")
    parser.add_argument("--data-days", type=int, default=30, help="the rows' updated_at spread over this many days up to now")
    parser.add_argument("--model-start", default="2025-01-01",
                        help="the model's min_start_time_epoch, a UTC date: its daily windows start here")
    parser.add_argument("--history-days", type=int,
                        help="instead of --model-start: the model's windows start this many days before the data")
    parser.add_argument("--instance", default=",".join(INSTANCES),
                        help="Dagster instances for incsync's tools, each config in a fresh one: sqlite, postgres (instances.py)")
    parser.add_argument("--port", type=int, default=15077, help="Spark Connect port for worker-connect, warm, warm1p")
    parser.add_argument("--spark", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting in every incsync config (a trial, not the product's defaults; repeatable)")
    parser.add_argument("--workdir")
    parser.add_argument("--json", help="also write the machine's state and every sample here")
    args = parser.parse_args()
    kinds = parse_instances(args.instance)
    tools = parse_tools(args.tools, AB_TOOLS, "--tools")
    c_tools = parse_tools(args.c_tools, C_TOOLS, "--c-tools")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # drop the databases on kill too

    work = Path(args.workdir or tempfile.mkdtemp(prefix="incsync-vs-dlt-"))
    work.mkdir(parents=True, exist_ok=True)
    user = pg_user()
    source_db, dest_db = f"incsync_vsdlt_src_{uuid.uuid4().hex[:6]}", f"incsync_vsdlt_dst_{uuid.uuid4().hex[:6]}"
    # Rows spread over the last --data-days up to 10 minutes ago on the daily grid from the model's start
    # (a user's model start lies long before most tenants' rows): a backfill covers every window of the grid,
    # most of them empty, and a scheduled incremental runs the window closed since the last tick and the open
    # one, from the HW.
    now = datetime.now(timezone.utc)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    data_start = today - timedelta(days=args.data_days)
    model_start = (data_start - timedelta(days=args.history_days) if args.history_days is not None
                   else datetime.fromisoformat(args.model_start).replace(tzinfo=timezone.utc))
    if model_start > data_start:
        sys.exit(f"--model-start {model_start:%Y-%m-%d} lies after the data's first day {data_start:%Y-%m-%d}")
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    instances = Instances(host=HOST, port=PORT, user=user)
    server = None
    workloads, destinations = args.workloads.split(","), args.destinations.split(",")
    destinations = ["mariadb" if d == "mysql" else d for d in destinations]
    if unknown := [d for d in destinations if d not in DESTINATIONS]:
        sys.exit(f"--destinations: unknown {', '.join(unknown)}; choose from {', '.join(DESTINATIONS)} (mysql = mariadb)")
    if "floor" in tools and (other := [d for d in destinations if d not in ("delta", "postgres")]):
        sys.exit(f"--tools floor: measures delta and postgres only, not {', '.join(other)}")
    loads = [os.getloadavg()]
    bench = None
    try:
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        if "mariadb" in destinations:  # dlt's sqlalchemy URL names a database: one of the run's own
            with mariadb(autocommit=True) as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{dest_db}`")
        t0 = time.monotonic()
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
            sizes = generate(conn, tenant_rows=args.tenant_rows, c_tenants=args.c_tenants, c_rows=args.c_rows if args.c_tenants else 0,
                             start=data_start, end=now - timedelta(minutes=10))
        print(f"generated {sum(sizes.values()):,} rows ({len(sizes)} tenants) in {time.monotonic() - t0:.0f} s; "
              f"incsync's configs hold {'every tenant' if args.config == 'all' else 'the transferred tenants'}, "
              f"model start {model_start:%Y-%m-%d}, daily windows", flush=True)
        bench = Bench(args, work, user, source_db, dest_db, model_start, instances, sizes)
        bench.data_end = now - timedelta(minutes=10)
        if {*CONNECT} & {*tools, *c_tools}:
            from incsync.spark.server import start_server

            t = time.monotonic()
            server = start_server(port=args.port, master="local[*]", log_file=work / "spark-server.log")
            bench.server_jvm = jvm_of(server.pid)
            print(f"Spark Connect server up in {time.monotonic() - t:.0f} s (JVM pid {bench.server_jvm}); "
                  "warming it up with one transfer", flush=True)
            bench.incsync(bench.incsync_config("warmup", "delta", [BIG], connect=True, instance=None), [BIG], backfill=True)
        each = lambda tool: [NO_INSTANCE] if tool.startswith("dlt") or tool == "floor" else kinds  # noqa: E731 - no instance
        for rep in range(args.repeat if {"A", "B"} & {*workloads} else 0):
            for destination in destinations:
                for tool in tools:
                    for kind in each(tool):
                        settle(admin)
                        bench.a_and_b(destination, tool, kind, rep, args.tenant_rows)
                loads.append(os.getloadavg())
        for rep in range(args.c_repeat if "C" in workloads else 0):
            for destination in destinations:
                for tool in c_tools:
                    for kind in each(tool):
                        settle(admin)
                        bench.c(destination, tool, kind, rep, sizes)
                loads.append(os.getloadavg())
    finally:
        if server is not None:
            from incsync.spark.server import stop_server

            stop_server(server)
        instances.close()
        if "mariadb" in destinations:
            if bench is None:
                with mariadb(autocommit=True) as conn, conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{dest_db}`")
            else:
                bench.drop_mariadb()
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.close()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    state = machine(loads)
    c_sizes = sorted((n for t, n in sizes.items() if t != BIG), reverse=True)
    print(f"\n{state['host']}, {state['cores']} cores, commit {state['commit']}, load averages (1/5/15 min) over the run: "
          + ", ".join("/".join(f"{x:.1f}" for x in load) for load in loads)
          + f"\nA/B tenant {args.tenant_rows:,} rows, B changes 1%"
          + (f"; C {len(c_sizes)} tenants, {sum(c_sizes):,} rows (largest {c_sizes[0]:,}, smallest {c_sizes[-1]:,})" if c_sizes else "")
          + f"; model start {model_start:%Y-%m-%d}, daily windows, {args.queries} quer{'y' if args.queries == 1 else 'ies'} a transfer;"
          f" cfg = recipients in incsync's config; the floor is the data movement alone (floor.py)")
    print("\n".join(summarize(bench.samples)))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": state, "args": vars(args), "model_start": f"{model_start:%Y-%m-%d}", "tenants": len(sizes),
            "rows": sum(sizes.values()), "samples": [asdict(s) for s in bench.samples]}, indent=1))


if __name__ == "__main__":
    main()

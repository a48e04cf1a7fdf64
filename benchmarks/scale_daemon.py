"""Workload S: many recipients of one model, one scheduled cycle launched by ``dagster-daemon``.

What a user with ``--recipients`` customers gets with the product's defaults: one PostgreSQL source
table shared by every tenant (``--rows`` rows each, last-modified spread over the last 30 days), a
destination per recipient (a PostgreSQL schema each, or a Delta table each), daily windows from a
model start a year before the data, no recipient override, Spark local in every run worker (no
Connect server), the ``dagster.yaml`` that ``incsync dagster-yaml`` writes (run queue with the
config's tag limits). ``--instance sqlite,postgres`` runs the whole workload once per Dagster
instance, each with fresh databases and its own folder under ``--workdir``: ``sqlite`` (incsync's
batching SQLite event log) and ``postgres`` (deploy/dagster.yaml's storage over a database of its own,
otherwise the same file; ``instances.py``).

1. Initial sync, not the measured cycle: ``incsync transfer orders`` (every enabled recipient; each
   recipient without a transfer record is re-synced from its start as one full refresh).
2. 1% of the rows change (``--change``), spread over the tenants.
3. The model's ``frequency`` is set to fire once, at the next minute after ``dagster-daemon`` has had
   ``--lead`` seconds to load; the daemon (sensor, scheduler, run queue, run launcher) runs the cycle.

Reported: time from the tick to the last materialization of its runs, the runs the tick created, the
schedule and sensor ticks' durations, partitions and rows materialized, failures, and the peak RSS of
the daemon's process tree (the daemon, its code server and the run workers with their JVMs), its
Python processes and its JVMs, each sampled every 0.5 s; for ``postgres`` also the rows Dagster
stored in its database. Not part of ``make test``:

    .venv/bin/python benchmarks/scale_daemon.py --recipients 10000 --rows 20 --workdir /tmp/bench-s --instance sqlite,postgres
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instances import INSTANCES, Instances, environment, parse_instances  # noqa: E402 - sibling script
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MODEL = "orders"


def tenant(k: int) -> str:
    return f"r{k:05d}"


def generate(dsn: str, recipients: int, rows: int, start: datetime, end: datetime) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, status text,
               amount numeric(12,2), updated_at timestamptz(6) NOT NULL)"""
        )
        span = int((end - start).total_seconds())
        conn.execute(
            """INSERT INTO orders
               SELECT g, 'r' || lpad(((g - 1) %% %s)::text, 5, '0'), (ARRAY['new','paid','shipped'])[1 + g %% 3],
                      (g %% 10000) / 100.0,
                      %s::timestamptz + ((g * 7919) %% %s) * interval '1 second' + (g %% 999983) * interval '1 microsecond'
               FROM generate_series(1::bigint, %s::bigint) g""",
            (recipients, start, span - 1, recipients * rows),
        )
        conn.execute("CREATE INDEX orders_tenant_lm ON orders (organization_id, updated_at)")
        conn.execute("VACUUM ANALYZE orders")
    return recipients * rows


def change(dsn: str, fraction: float) -> int:
    """``fraction`` of the rows, every 1/fraction-th id, so the changes spread over the tenants."""
    step = max(1, round(1 / fraction))
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "UPDATE orders SET amount = amount + 1, updated_at = clock_timestamp() WHERE id %% %s = 0", (step,)
        ).rowcount


def write_config(path: Path, *, source_db: str, user: str, recipients: int, destination: str, start: datetime,
                 frequency: str) -> None:
    destinations, entries = [], []
    for k in range(recipients):
        r = tenant(k)
        if destination == "delta":
            destinations.append({"name": f"d_{r}", "kind": "delta", "path": str(path.parent / "out" / r)})
        else:
            destinations.append({"name": f"d_{r}", "kind": "postgres", "dsn_env": "BENCH_DEST_DSN", "schema": f"s_{r}"})
        entries.append({"id": r, "id_in_provider_system": r, "destination": f"d_{r}"})
    config = {
        "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{source_db}",
                     "user": user}],
        "destinations": destinations,
        "models": [{"model_name": MODEL, "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "min_start_time_epoch": int(start.timestamp()), "frequency": frequency}],
        "recipients": entries,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)


class TreeRss:
    """Peak summed RSS of a process and its descendants, sampled every ``period`` seconds: of the whole
    tree, of its JVMs (``java``) and of the rest (Python: daemon, code servers, run workers), each its own peak."""

    def __init__(self, pid: int, period: float = 0.5):
        self.pid, self.period, self.peak, self.peak_processes = pid, period, 0, 0
        self.peak_jvm = self.peak_python = 0
        self.peak_by_role: dict[str, int] = {}  # each role's own peak (summed over its processes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[tuple[int, bool]]:
        """(pid, is a JVM) of the process and its descendants."""
        children: dict[int, list[int]] = {}
        jvm: set[int] = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    head, tail = (entry / "stat").read_text().rsplit(")", 1)
                    ppid = int(tail.split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
                if head.split("(", 1)[1] == "java":
                    jvm.add(int(entry.name))
        out, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            out.append((pid, pid in jvm))
            todo += children.get(pid, [])
        return out

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            tree = self._tree()
            rss = [(self._rss(p), is_jvm) for p, is_jvm in tree]
            total = sum(r for r, _ in rss)
            roles: dict[str, int] = {}
            for (pid, is_jvm), (r, _) in zip(tree, rss, strict=True):
                role = "jvm" if is_jvm else self._role(pid)
                roles[role] = roles.get(role, 0) + r
            for role, r in roles.items():
                self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), r)
            self.peak_jvm = max(self.peak_jvm, sum(r for r, is_jvm in rss if is_jvm))
            self.peak_python = max(self.peak_python, sum(r for r, is_jvm in rss if not is_jvm))
            if total > self.peak:
                self.peak, self.peak_processes = total, len(tree)

    @staticmethod
    def _role(pid: int) -> str:
        """What a Python process of the tree is, from its command line: the daemon, a code server, a run, other."""
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return "other"
        for needle, role in (("execute_run", "run"), ("api grpc", "code server"), ("code-server", "code server"),
                             ("dagster-daemon", "daemon"), ("dagster_daemon", "daemon"), ("incsync", "command")):
            if needle in cmd:
                return role
        return "other"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def next_tick(lead: float) -> datetime:
    """The first whole minute at least ``lead`` seconds from now."""
    at = datetime.now(timezone.utc) + timedelta(seconds=lead)
    return (at + timedelta(minutes=1)).replace(second=0, microsecond=0)


def schedule_name_of(model: str) -> str:
    return f"incsync_{model}_schedule"  # incsync.orchestration.schedules.schedule_name


def instigator_state(instance, name: str):  # noqa: ANN001, ANN201 - dagster types, imported late
    for state in instance.all_instigator_state():
        if state.instigator_name == name:
            return state
    return None


def cycle_figures(instance, tick_time: datetime, timeout: float) -> dict[str, object]:  # noqa: ANN001
    """Wait for the schedule's tick at ``tick_time`` and its runs; return the cycle's figures."""
    import dagster as dg

    from incsync.orchestration.sensors import RECIPIENT_SENSOR

    name = schedule_name_of(MODEL)
    deadline = time.monotonic() + timeout
    tick = None
    while time.monotonic() < deadline:
        state = instigator_state(instance, name)
        if state is not None:
            ticks = [t for t in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=5)
                     if t.timestamp >= tick_time.timestamp() - 1 and t.status.value in ("SUCCESS", "FAILURE", "SKIPPED")]
            if ticks:
                tick = ticks[-1]
                break
        time.sleep(1)
    if tick is None:
        raise SystemExit(f"no schedule tick at {tick_time:%H:%M} within {timeout:.0f} s")
    print(f"  tick {tick.status.value}: {len(tick.run_ids)} runs, evaluated in "
          f"{(tick.end_timestamp or tick.timestamp) - tick.timestamp:.2f} s", flush=True)
    if tick.status.value != "SUCCESS":
        raise SystemExit(f"schedule tick {tick.status.value}: {tick.error or tick.skip_reason}")
    finished = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    done = 0
    while time.monotonic() < deadline:
        runs = instance.get_runs(dg.RunsFilter(run_ids=list(tick.run_ids)))
        now_done = sum(r.status in finished for r in runs)
        if now_done != done:
            done = now_done
            print(f"  {done}/{len(tick.run_ids)} runs finished at +{time.time() - tick.timestamp:.0f} s", flush=True)
        if done == len(tick.run_ids):
            break
        time.sleep(2)
    else:
        raise SystemExit(f"the cycle's runs did not finish within {timeout:.0f} s")
    materialized, rows, last = 0, 0, tick.timestamp
    # The asset's materializations of the cycle's runs, from the index (incsync's SQLite event log stores a
    # run's materializations there only, not again in the run's shard).
    run_ids, cursor = {run.run_id for run in runs}, None
    since = dg.AssetRecordsFilter(asset_key=dg.AssetKey(["app_db", MODEL]), after_timestamp=tick.timestamp - 1)
    while True:
        page = instance.fetch_materializations(since, limit=10_000, cursor=cursor, ascending=True)
        for record in page.records:
            if record.event_log_entry.run_id not in run_ids:
                continue
            materialized += 1
            last = max(last, record.event_log_entry.timestamp)
            value = record.event_log_entry.asset_materialization.metadata.get("rows_transferred")
            rows += int(value.value) if value is not None else 0
        if not page.has_more:
            break
        cursor = page.cursor
    sensor = instigator_state(instance, RECIPIENT_SENSOR)
    sensor_ticks = [] if sensor is None else instance.get_ticks(sensor.instigator_origin_id, sensor.selector_id, limit=50)
    sensor_secs = [(t.end_timestamp or t.timestamp) - t.timestamp for t in sensor_ticks]
    return {
        "tick_at": datetime.fromtimestamp(tick.timestamp, timezone.utc).isoformat(),
        "schedule_tick_seconds": round((tick.end_timestamp or tick.timestamp) - tick.timestamp, 2),
        "runs_created": len(tick.run_ids),
        "runs_failed": sum(r.status != dg.DagsterRunStatus.SUCCESS for r in runs),
        "tick_to_last_materialization_seconds": round(last - tick.timestamp, 1),
        "partitions_materialized": materialized,
        "rows_transferred": rows,
        "sensor_ticks": len(sensor_secs),
        "sensor_tick_seconds_max": round(max(sensor_secs), 2) if sensor_secs else None,
    }


def cycle(args: argparse.Namespace, kind: str, work: Path, user: str, instances: Instances) -> dict[str, object]:
    """The workload on the ``kind`` instance, in ``work`` (its own databases); its figures."""
    work.mkdir(parents=True, exist_ok=True)
    state_file = work / "state.json"
    if args.resume:
        state = json.loads(state_file.read_text())
    else:
        suffix = uuid.uuid4().hex[:8]
        state = {"source_db": f"bench_s_src_{suffix}", "dest_db": f"bench_s_dst_{suffix}",
                 "now": datetime.now(timezone.utc).replace(microsecond=0).isoformat()}
        if kind == "postgres":
            state["dagster_db"] = instances.next_name()
    source_db, dest_db, dagster_db = state["source_db"], state["dest_db"], state.get("dagster_db")
    admin = f"postgresql://{user}@{HOST}:{PORT}/postgres"
    dsn = lambda db: f"postgresql://{user}@{HOST}:{PORT}/{db}"  # noqa: E731
    home = work / ".dagster"
    config = work / "incsync.yaml"
    env = {**os.environ, "DAGSTER_HOME": str(home), "INCSYNC_CONFIG": str(config), "INCSYNC_STAGING_DIR": str(work / "staging"),
           "BENCH_DEST_DSN": dsn(dest_db)}
    daemon = None
    result: dict[str, object] = {"instance": kind, "recipients": args.recipients, "rows_per_recipient": args.rows,
                                 "destination": args.destination}
    print(f"--- instance {kind} ({work})", flush=True)
    try:
        if not args.resume:
            with psycopg.connect(admin, autocommit=True) as conn:
                for db in (source_db, dest_db):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
            state_file.write_text(json.dumps(state))
        now = datetime.fromisoformat(state["now"])
        data_start = now - timedelta(days=30)
        # Never fires during the initial sync: the tick is set after it.
        write_config(config, source_db=source_db, user=user, recipients=args.recipients, destination=args.destination,
                     start=data_start - timedelta(days=365), frequency="0 0 1 1 *")
        instance_env = instances.write(kind, config=config, home=home, base=ROOT / "dagster.yaml", db=dagster_db)
        env.update(instance_env)
        if dagster_db:
            result["dagster_database"] = dagster_db
        if not args.resume:
            total = generate(dsn(source_db), args.recipients, args.rows, data_start, now - timedelta(minutes=5))
            print(f"source: {total:,} rows over {args.recipients:,} tenants", flush=True)
            began = time.monotonic()
            initial = subprocess.run([str(BIN / "incsync"), "transfer", MODEL, "--no-worker", "-c", str(config)], env=env,
                                     capture_output=True, text=True)
            result["initial_sync_seconds"] = round(time.monotonic() - began, 1)
            print(f"initial sync (incsync transfer, every recipient): {result['initial_sync_seconds']} s, "
                  f"exit {initial.returncode}", flush=True)
            if initial.returncode:
                print(initial.stdout[-3000:], initial.stderr[-3000:])
                raise SystemExit("the initial sync failed")

        import dagster as dg

        harness_env = {"DAGSTER_HOME": str(home), **instance_env}
        if args.resume:  # runs an interrupted cycle left queued would run before this cycle's
            with environment(harness_env), dg.DagsterInstance.get() as instance:
                unfinished = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                              dg.DagsterRunStatus.STARTED]
                for run in instance.get_runs(dg.RunsFilter(statuses=unfinished)):
                    instance.report_run_canceled(run, message="left by an interrupted benchmark cycle")
        changed = change(dsn(source_db), args.change)
        result["rows_changed"] = changed
        tick = next_tick(args.lead)
        write_config(config, source_db=source_db, user=user, recipients=args.recipients, destination=args.destination,
                     start=data_start - timedelta(days=365), frequency=f"{tick.minute} {tick.hour} * * *")
        print(f"{changed:,} rows changed; the schedule fires at {tick:%H:%M:%S} UTC", flush=True)

        log = (work / "daemon.log").open("w")
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        rss = TreeRss(daemon.pid)
        with environment(harness_env), dg.DagsterInstance.get() as instance:
            print(f"  instance storage: {type(instance.run_storage).__name__}, {type(instance.event_log_storage).__name__}", flush=True)
            figures = cycle_figures(instance, tick, args.timeout)
        rss.stop()
        result.update(figures)
        result["peak_tree_rss_mb"] = round(rss.peak / 2**20)
        result["peak_tree_python_rss_mb"] = round(rss.peak_python / 2**20)
        result["peak_tree_jvm_rss_mb"] = round(rss.peak_jvm / 2**20)
        result["peak_tree_processes"] = rss.peak_processes
    finally:
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
        if args.keep:
            if dagster_db:
                instances.keep(dagster_db)
        else:
            if dagster_db:
                result["dagster_database_rows"] = instances.drop(dagster_db)
            with psycopg.connect(admin, autocommit=True) as conn:
                for db in (source_db, dest_db):
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    print(json.dumps(result, indent=2), flush=True)
    (work / "result.json").write_text(json.dumps(result, indent=2))
    return result


FIGURES = [("time from the tick to the last materialization, s", "tick_to_last_materialization_seconds"),
           ("runs the tick created / failed", ("runs_created", "runs_failed")),
           ("schedule tick, s", "schedule_tick_seconds"),
           ("sensor ticks / the longest, s", ("sensor_ticks", "sensor_tick_seconds_max")),
           ("partitions materialized / rows transferred", ("partitions_materialized", "rows_transferred")),
           ("peak RSS of the daemon's tree / its Python / its JVMs, MB",
            ("peak_tree_rss_mb", "peak_tree_python_rss_mb", "peak_tree_jvm_rss_mb")),
           ("initial sync (not the cycle), s", "initial_sync_seconds")]


def table(results: list[dict[str, object]]) -> list[str]:
    """One column per instance."""
    lines = ["| figure | " + " | ".join(str(r["instance"]) for r in results) + " |", "|---|" + "---|" * len(results)]
    for label, keys in FIGURES:
        keys = keys if isinstance(keys, tuple) else (keys,)
        cells = [" / ".join(f"{r[k]:,}" if isinstance(r.get(k), int) else str(r.get(k, "–")) for k in keys) for r in results]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=20, help="rows per recipient")
    parser.add_argument("--change", type=float, default=0.01, help="fraction of rows changed before the cycle")
    parser.add_argument("--destination", choices=("postgres", "delta"), default="postgres")
    parser.add_argument("--instance", default=",".join(INSTANCES),
                        help="Dagster instances to run the workload on, one after the other: sqlite, postgres (instances.py)")
    parser.add_argument("--lead", type=float, default=60.0, help="seconds the daemon gets to load before the tick")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--workdir", type=Path, default=None, help="one folder per instance below it")
    parser.add_argument("--keep", action="store_true", help="keep the databases and the work folder")
    parser.add_argument("--resume", action="store_true",
                        help="reuse --workdir's databases and initial sync (kept with --keep); run another cycle")
    args = parser.parse_args()
    kinds = parse_instances(args.instance)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (databases, daemon) on kill too

    work = args.workdir or Path(f"/tmp/incsync-bench-s-{uuid.uuid4().hex[:6]}")
    user = pg_user()
    instances = Instances(host=HOST, port=PORT, user=user)
    results = []
    try:
        for kind in kinds:
            results.append(cycle(args, kind, work / kind, user, instances))
    finally:
        instances.close()
    print(f"\n{os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"{args.recipients:,} recipients, {args.rows} rows each, {args.destination} destinations")
    print("\n".join(table(results)))
    (work / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

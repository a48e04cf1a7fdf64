"""Benchmark (issue 33): 100 scheduled runs of a 0.01 % change into one big tenant's Delta table, beside dlt.

One PostgreSQL ``orders`` table holds one tenant of ``--rows`` rows (default 10,000,000) over the last
``--data-days`` days (a unique database, dropped at the end). Both tools backfill it into Delta:
  incsync  ``incsync transfer --backfill`` (one CLI process, a cold JVM), then a warm ``incsync worker``
           (embedded Spark, started once) serves every scheduled run, each one ``incsync transfer
           --worker SOCKET``: a scheduled tick runs against a resident process (the daemon's code server or
           the worker), and a cold JVM per run (20-30 s on a loaded machine) would swamp the run's own cost
  dlt      ``benchmarks/dlt_load.py`` (sql_table, pyarrow backend, ``write_disposition="merge"`` on the
           primary key, ``table_format="delta"``), a fresh process per run, as a user runs a pipeline
Then ``--runs`` times: ``--fraction`` of the rows is changed (``--locality recent``: keys drawn among the
newest 1 %; ``scattered``: uniform over the key space), and each tool loads the change. Optionally
``incsync maintain`` every ``--maintain-every`` runs, and (``--final-maintain``) once at the end with the
destination's ``retention_hours: 0``, to show the bound. dlt runs no maintenance of its own (a user
can call delta-rs's optimize/vacuum on ``dlt.common.libs.deltalake.get_delta_tables``); none is run for it.

Per run and tool: wall time; files and bytes added/removed (from the Delta log, the versions the run
committed); files in the table; bytes on disk of the table folder (data and log); peak RSS of the tree
(incsync: the CLI client plus the worker and its JVM, their peaks reset before the run; dlt: its process).
Prints first/median/last run and totals side by side; ``--json`` writes every run.

    .venv/bin/python benchmarks/many_runs.py [--rows 10000000 --runs 100 --fraction 0.0001
        --locality recent|scattered --maintain-every 0 --final-maintain --json runs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dlt import BIN, HOST, PORT, ROOT, descendants, measure, reset_peak_rss, vm_hwm  # noqa: E402


def generate(conn: psycopg.Connection, rows: int, *, start: datetime, end: datetime) -> None:
    """``rows`` rows of tenant ``big``; a key's ``updated_at`` grows with the key (newer keys, newer rows)."""
    conn.execute("""CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, status text,
                    amount numeric(12,2), payload jsonb, updated_at timestamptz(6) NOT NULL)""")
    span = int((end - start).total_seconds())
    conn.execute(
        """INSERT INTO orders SELECT g, 'big', (ARRAY['new','paid','shipped'])[1 + g %% 3], (g %% 10000) / 100.0,
                  jsonb_build_object('n', g, 'tag', 'x' || (g %% 7)),
                  %s::timestamptz + (g::float8 / %s * %s) * interval '1 second'
           FROM generate_series(1::bigint, %s::bigint) g""", (start, rows, span - 1, rows))
    conn.execute("CREATE INDEX orders_tenant_lm ON orders (organization_id, updated_at)")
    conn.execute("VACUUM ANALYZE orders")


def config_file(folder: Path, *, source_db: str, user: str, start: datetime, retention_hours: int | None = None) -> Path:
    destination = {"name": "d_big", "kind": "delta", "path": str(folder / "out")}
    if retention_hours is not None:
        destination["retention_hours"] = retention_hours
    doc = {"sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{source_db}",
                        "user": user}],
           "destinations": [destination],
           "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                       "last_modified_column": "updated_at", "organization_column": "organization_id",
                       "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(start.timestamp())}],
           "recipients": [{"id": "big", "id_in_provider_system": "big", "destination": "d_big"}]}
    path = folder / "incsync.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class Table:
    """A Delta table's folder, read through its log: what each run committed, files live, bytes on disk."""

    def __init__(self, path: Path):
        self.path, self.seen = path, -1

    def versions(self) -> list[int]:
        return sorted(int(p.stem) for p in (self.path / "_delta_log").glob("*.json"))

    def since_last(self) -> dict[str, int]:
        """Files and bytes the commits after the last call added and removed."""
        out = {"files_added": 0, "bytes_added": 0, "files_removed": 0, "bytes_removed": 0, "commits": 0}
        for v in self.versions():
            if v <= self.seen:
                continue
            out["commits"] += 1
            for line in (self.path / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    out["files_added"] += 1
                    out["bytes_added"] += action["add"]["size"]
                elif "remove" in action:
                    out["files_removed"] += 1
                    out["bytes_removed"] += action["remove"].get("size", 0)
            self.seen = v
        return out

    def state(self) -> dict[str, int]:
        from deltalake import DeltaTable

        disk = sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
        return {"files_live": len(DeltaTable(str(self.path)).file_uris()), "bytes_on_disk": disk,
                "files_on_disk": sum(1 for _ in self.path.glob("**/*.parquet") if "_delta_log" not in _.parts)}


class Worker:
    """``incsync worker`` for the config, ready before any timing."""

    def __init__(self, config: Path, env: dict[str, str]):
        self.socket = config.parent / "w.sock"
        self.process = subprocess.Popen([str(BIN / "incsync"), "worker", "-c", str(config), "--socket", str(self.socket)],
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip().startswith("export INCSYNC_WORKER="):
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return
        raise RuntimeError(f"incsync worker exited with {self.process.wait()} before it was ready")

    def reset(self) -> None:
        for pid, _ in descendants(self.process.pid):
            try:
                reset_peak_rss(pid)
            except OSError:
                pass

    def peak(self) -> int:
        return sum(vm_hwm(pid) for pid, _ in descendants(self.process.pid))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def change(dsn: str, *, rows: int, n: int, locality: str, rng: random.Random) -> None:
    """``n`` distinct keys, stamped a minute ago (past both tools' high watermark), changed."""
    low = rows - max(n, rows // 100) + 1 if locality == "recent" else 1
    keys = rng.sample(range(low, rows + 1), n)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""UPDATE orders SET status = 'changed', amount = amount + 1,
                               updated_at = clock_timestamp() - interval '1 minute'
                        WHERE id = ANY(%s)""", (keys,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--fraction", type=float, default=0.0001)
    parser.add_argument("--locality", choices=["recent", "scattered"], default="recent")
    parser.add_argument("--maintain-every", type=int, default=0, help="incsync maintain every N runs (0: never)")
    parser.add_argument("--final-maintain", action="store_true", help="incsync maintain at the end, retention_hours 0")
    parser.add_argument("--data-days", type=int, default=30)
    parser.add_argument("--tools", default="incsync,dlt")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    tools = args.tools.split(",")
    user = os.environ.get("PGUSER", "postgres")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="incsync-many-runs-"))
    now = datetime.now(timezone.utc)
    start = now - timedelta(days=args.data_days)
    source_db = f"incsync_mr_src_{uuid.uuid4().hex[:6]}"
    dsn = f"postgresql://{user}@{HOST}:{PORT}/{source_db}"
    n = max(1, round(args.rows * args.fraction))
    rng = random.Random(args.seed)
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    folder = work / "incsync"
    config = config_file(folder, source_db=source_db, user=user, start=start)
    env = {**os.environ, "DAGSTER_HOME": str(folder / ".dagster"), "INCSYNC_STAGING_DIR": str(folder / "staging")}
    tables = {"incsync": Table(folder / "out" / "orders"), "dlt": Table(work / "dlt" / "out" / "bench" / "orders")}
    dlt_command = [str(BIN / "python"), str(ROOT / "benchmarks" / "dlt_load.py"), "--source-dsn", dsn, "--tenant", "big",
                   "--destination", "delta", "--dataset", "bench", "--pipelines-dir", str(work / "dlt" / "pipelines"),
                   "--delta-path", str(work / "dlt" / "out")]
    dlt_env = {**os.environ, "DLT_DATA_DIR": str(work / "dlt" / "data")}
    cli = [str(BIN / "incsync"), "transfer", "orders", "--recipient", "big", "-c", str(config)]
    runs: list[dict] = []
    worker = None

    def record(tool: str, run: int, phase: str, wall: float, peak: int) -> None:
        entry = {"tool": tool, "run": run, "phase": phase, "wall_s": round(wall, 2), "peak_rss_tree": peak,
                 **tables[tool].since_last(), **tables[tool].state()}
        runs.append(entry)
        print(json.dumps(entry), flush=True)

    try:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(source_db)))
        with psycopg.connect(dsn, autocommit=True) as conn:
            generate(conn, args.rows, start=start, end=now - timedelta(minutes=10))
        print(f"generated {args.rows:,} rows; {n:,} changed per run ({args.locality}); work in {work}", flush=True)
        if "incsync" in tools:
            wall, _, _, tree, _ = measure([*cli, "--backfill", "--no-worker"], env)
            record("incsync", 0, "backfill", wall, tree)
            worker = Worker(config, env)
        if "dlt" in tools:
            wall, py, _, tree, _ = measure(dlt_command, dlt_env)
            record("dlt", 0, "backfill", wall, max(py, tree))
        for run in range(1, args.runs + 1):
            change(dsn, rows=args.rows, n=n, locality=args.locality, rng=rng)
            if worker is not None:
                worker.reset()
                wall, py, _, tree, _ = measure([*cli, "--worker", str(worker.socket)], env)
                record("incsync", run, "run", wall, py + worker.peak())
                if args.maintain_every and run % args.maintain_every == 0:
                    wall, _, _, tree, out = measure([str(BIN / "incsync"), "maintain", "-c", str(config)], env)
                    print(out.strip(), flush=True)
                    record("incsync", run, "maintain", wall, tree)
            if "dlt" in tools:
                wall, py, _, tree, _ = measure(dlt_command, dlt_env)
                record("dlt", run, "run", wall, max(py, tree))
        if worker is not None and args.final_maintain:
            worker.stop()
            worker = None
            config_file(folder, source_db=source_db, user=user, start=start, retention_hours=0)
            wall, _, _, tree, out = measure([str(BIN / "incsync"), "maintain", "-c", str(config)], env)
            print(out.strip(), flush=True)
            record("incsync", args.runs, "final maintain (retention_hours 0)", wall, tree)
    finally:
        if worker is not None:
            worker.stop()
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(source_db)))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "load": os.getloadavg(),
                                         "runs": runs}, indent=1))
    summary(runs, tools, args.runs)


def summary(runs: list[dict], tools: list[str], count: int) -> None:
    mb = 1e6
    by_tool = {t: [r for r in runs if r["tool"] == t] for t in tools}

    def row(label: str, pick) -> None:  # noqa: ANN001 - a function of one tool's entries
        print(f"| {label} | " + " | ".join(pick(by_tool[t]) for t in tools) + " |")

    def spread(key: str, scale: float = 1, fmt: str = "{:,.1f}"):  # noqa: ANN202 - first / median / last run
        def pick(rs: list[dict]) -> str:
            inc = [r[key] / scale for r in rs if r["phase"] == "run"]
            return " / ".join(fmt.format(v) for v in (inc[0], statistics.median(inc), inc[-1]))
        return pick

    def total(key: str, phase: str, scale: float = 1):  # noqa: ANN202
        return lambda rs: f"{sum(r[key] for r in rs if r['phase'].startswith(phase)) / scale:,.1f}"

    def first(key: str, scale: float = 1, phase: str = "backfill"):  # noqa: ANN202
        return lambda rs: next((f"{r[key] / scale:,.1f}" for r in rs if r["phase"] == phase), "–")

    print(f"\n| first / median / last of {count} runs | " + " | ".join(tools) + " |")
    print("|---|" + "---|" * len(tools))
    row("backfill: wall s", first("wall_s"))
    row("backfill: files / MB on disk", lambda rs: f"{rs[0]['files_live']:,} / {rs[0]['bytes_on_disk'] / mb:,.1f}")
    row("backfill: peak RSS MB (tree)", first("peak_rss_tree", 2**20))
    row("run: wall s", spread("wall_s"))
    row("run: MB written", spread("bytes_added", mb, "{:,.2f}"))
    row("run: MB removed from the table", spread("bytes_removed", mb, "{:,.2f}"))
    row("run: files added / removed", lambda rs: spread("files_added", fmt="{:,.0f}")(rs) + " ; "
        + spread("files_removed", fmt="{:,.0f}")(rs))
    row("run: files in the table (live)", spread("files_live", fmt="{:,.0f}"))
    row("run: parquet files on disk", spread("files_on_disk", fmt="{:,.0f}"))
    row("run: MB on disk (table folder)", spread("bytes_on_disk", mb))
    row("run: peak RSS MB (tree)", spread("peak_rss_tree", 2**20, "{:,.0f}"))
    row(f"total: wall s of the {count} runs", total("wall_s", "run"))
    row(f"total: MB written by the {count} runs", total("bytes_added", "run", mb))
    row("total: maintenance wall s / MB written", lambda rs: f"{sum(r['wall_s'] for r in rs if 'maintain' in r['phase']):,.1f} / "
        f"{sum(r['bytes_added'] for r in rs if 'maintain' in r['phase']) / mb:,.1f}")
    row("end: files live / parquet files on disk", lambda rs: f"{rs[-1]['files_live']:,} / {rs[-1]['files_on_disk']:,}")
    row("end: MB on disk", lambda rs: f"{rs[-1]['bytes_on_disk'] / mb:,.1f}")


if __name__ == "__main__":
    main()

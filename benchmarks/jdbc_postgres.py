"""Benchmark: one large tenant of a skewed multi-tenant PostgreSQL table into Delta, through Dagster.

Generates ``--rows`` rows over ``--tenants`` tenants (Zipf-like sizes) spread over ``--days`` daily
windows, then measures for the largest tenant:
  1. the backfill (every window in one Dagster run, as `incsync transfer --backfill` does),
  2. an incremental run of the last window after 1% of that tenant's rows changed.
It prints wall time, rows, rows/s and peak RSS (Python + Spark's JVM) per phase, and how much of the
first phase the Spark start-up took. Not part of the test suite:

    .venv/bin/python benchmarks/jdbc_postgres.py [--rows 1000000 --tenants 50 --days 7 --partitions 1 --repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

HOST, PORT = "127.0.0.1", 5432
START = datetime(2024, 1, 1, tzinfo=timezone.utc)


class PeakRss:
    """Samples the resident memory of this process and its children (Spark's JVM) from /proc."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def reset(self) -> None:
        self.peak = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(os.getpid()))
            self._stop.wait(self.interval)


def tree_rss(root: int) -> int:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parents.items() if pp == pid and p not in tree]
        tree.update(children)
        frontier.extend(children)
    total = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return total


def pg_user() -> str:
    for user in ("postgres", "root"):
        try:
            with psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", connect_timeout=5):
                return user
        except psycopg.OperationalError:
            continue
    sys.exit(f"PostgreSQL on {HOST}:{PORT} accepts neither postgres nor root")


def generate(conn: psycopg.Connection, *, rows: int, tenants: int, days: int) -> list[tuple[str, int]]:
    """A skewed table: tenant k has weight 1/(k+1); returns (tenant, rows) largest first."""
    conn.execute(
        """CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, status text,
           amount numeric(12,2), payload jsonb, updated_at timestamptz(6) NOT NULL)"""
    )
    weights = [1 / (k + 1) for k in range(tenants)]
    total = sum(weights)
    counts = [max(1, int(rows * w / total)) for w in weights]
    counts[0] += rows - sum(counts)
    bounds, acc = [], 0
    for k, c in enumerate(counts):
        bounds.append((f"org_{k:03d}", acc + 1, acc + c))
        acc += c
    seconds = days * 86_400
    with conn.cursor() as cur:
        for tenant, lo, hi in bounds:
            cur.execute(
                """INSERT INTO orders
                   SELECT g, %s, (ARRAY['new','paid','shipped'])[1 + g %% 3], (g %% 10000) / 100.0,
                          jsonb_build_object('n', g, 'tag', 'x' || (g %% 7)),
                          %s::timestamptz + ((g * 7919) %% %s) * interval '1 second' + (g %% 1000000) * interval '1 microsecond'
                   FROM generate_series(%s::bigint, %s::bigint) g""",
                (tenant, START, seconds, lo, hi),
            )
    conn.execute("CREATE INDEX orders_tenant_lm ON orders (organization_id, updated_at)")
    conn.execute("ANALYZE orders")
    return sorted(((t, hi - lo + 1) for t, lo, hi in bounds), key=lambda x: -x[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--partitions", type=int, default=1, help="max_concurrent_queries_per_transfer")
    parser.add_argument("--repeat", type=int, default=3, help="measure backfill + incremental this many times")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # Dagster's beta/preview notices would interleave with the table

    work = Path(args.workdir or tempfile.mkdtemp(prefix="incsync-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("INCSYNC_STAGING_DIR", str(work / "staging"))
    user, db = pg_user(), f"incsync_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    measured: dict[str, list[tuple[float, int, int]]] = {"backfill": [], "incremental": []}
    try:
        t0 = time.monotonic()
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=db, autocommit=True) as conn:
            sizes = generate(conn, rows=args.rows, tenants=args.tenants, days=args.days)
        print(f"generated {args.rows:,} rows, {args.tenants} tenants in {time.monotonic() - t0:.1f} s; "
              f"largest {sizes[0][0]}={sizes[0][1]:,}, median {sizes[len(sizes) // 2][1]:,}, smallest {sizes[-1][1]:,}")
        tenant, tenant_rows = sizes[0]
        config = work / "incsync.yaml"
        config.write_text(yaml.safe_dump({
            "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{db}",
                         "user": user, "max_concurrent_queries_per_transfer": args.partitions}],
            "destinations": [{"name": "big_delta", "kind": "delta", "path": str(work / "out")}],
            "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                        "last_modified_column": "updated_at", "organization_column": "organization_id",
                        "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(START.timestamp())}],
            "recipients": [{"id": "big", "id_in_provider_system": tenant, "destination": "big_delta"}],
        }, sort_keys=False))
        with PeakRss() as rss:
            import dagster as dg
            from deltalake import DeltaTable
            from pyspark.sql import SparkSession

            from incsync.config.load import load_config
            from incsync.operations.runs import run_transfers
            from incsync.orchestration.definitions import build_definitions
            from incsync.spark.session import spark_config

            t_start = time.monotonic()
            builder = SparkSession.builder
            for key, value in spark_config(yaml.safe_load(config.read_text()).get("spark")).items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark.range(1).count()
            startup = time.monotonic() - t_start

            defs = build_definitions(config)
            cfg = load_config(config)
            model, recipient = cfg.model("orders"), cfg.recipient("big")
            windows = [(START + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(args.days)]
            changed = max(1, tenant_rows // 100)
            for attempt in range(args.repeat):
                shutil.rmtree(work / "out", ignore_errors=True)  # a fresh destination and instance each time
                home = work / f"dagster_home_{attempt}"
                home.mkdir()
                with dg.instance_for_test(temp_dir=str(home)) as instance:

                    def run(windows: list[str], *, scheduled: bool) -> int:
                        """As `incsync transfer` does it: consecutive windows share one Dagster run."""
                        lines = run_transfers(defs, instance, config=cfg, model=model, recipient=recipient,
                                              windows=windows, scheduled=scheduled)
                        assert all(line.ok for line in lines), lines
                        return sum(line.rows_transferred or 0 for line in lines)

                    rss.reset()
                    t = time.monotonic()
                    moved = run(windows, scheduled=False)
                    measured["backfill"].append((time.monotonic() - t, moved, rss.peak))
                    landed = DeltaTable(str(work / "out" / "orders")).to_pyarrow_dataset().count_rows()
                    # rows_transferred counts the lookback overlap between windows too; the table holds each row once.
                    assert landed == tenant_rows, f"Delta holds {landed} rows, the tenant has {tenant_rows}"

                    last = START + timedelta(days=args.days - 1)
                    with psycopg.connect(host=HOST, port=PORT, user=user, dbname=db, autocommit=True) as conn:
                        conn.execute(
                            """UPDATE orders SET status = 'changed', updated_at = %s WHERE id IN (
                               SELECT id FROM orders WHERE organization_id = %s ORDER BY id OFFSET %s LIMIT %s)""",
                            (last + timedelta(hours=23, minutes=59, seconds=59), tenant, attempt * changed, changed),
                        )
                    rss.reset()
                    t = time.monotonic()
                    moved = run(windows[-1:], scheduled=True)
                    measured["incremental"].append((time.monotonic() - t, moved, rss.peak))
            spark.stop()
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.close()

    print(f"\ntenant {tenant}: {tenant_rows:,} of {args.rows:,} rows; {args.days} daily windows; "
          f"{args.partitions} JDBC quer{'y' if args.partitions == 1 else 'ies'} per transfer; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("median of", args.repeat, "(min-max); start-up share = Spark start-up / (start-up + backfill)")
    print(f"{'phase':<30}{'wall s':>18}{'rows':>10}{'rows/s':>10}{'peak RSS MB':>13}{'spark start s':>15}{'start share':>13}")
    labels = {"backfill": f"backfill ({args.days} windows, 1 run)", "incremental": f"incremental ({changed:,} changed)"}
    for phase, runs in measured.items():
        walls = sorted(w for w, _, _ in runs)
        wall, moved, peak = statistics.median(walls), runs[0][1], max(p for _, _, p in runs)
        start = f"{startup:.1f}" if phase == "backfill" else "-"
        share = f"{startup / (startup + wall):.0%}" if phase == "backfill" else "-"
        print(f"{labels[phase]:<30}{f'{wall:.1f} ({walls[0]:.1f}-{walls[-1]:.1f})':>18}{moved:>10,}{moved / wall:>10,.0f}"
              f"{peak / 2**20:>13,.0f}{start:>15}{share:>13}")


if __name__ == "__main__":
    main()

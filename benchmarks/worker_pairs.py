"""Two versions of incsync on the README's worker, pairwise: A then B, old and new in turn on the same data.

A shared 2-core machine's speed drifts by 2x within minutes, so a change is measured against the code before
it in pairs: per destination and pair, a fresh ``incsync worker -c incsync.yaml`` (local Spark) of each tree,
A (the 500,000-row tenant's first backfill, the worker's first transfer) then B (1 % changed), the two trees
in turn (old first in even pairs, new first in odd ones), each on a fresh destination and Dagster instance.
The data, the config (every recipient of the data), the worker and the client are ``compare_dlt.py``'s; each
tree runs with ``PYTHONPATH`` set to it, so the venv's pyspark, Dagster and delta-rs are the same.

    .venv/bin/python benchmarks/worker_pairs.py --old /tmp/base --new . [--pairs 3 --destinations delta,postgres
        --tenant-rows 500000 --c-tenants 200 --c-rows 5000000 --max-load 4 --json FILE]

``--old`` / ``--new``: source trees (``git archive <commit> | tar -x -C DIR`` gives one). It prints each run
(wall seconds, rows, the worker's Python and JVM peaks, the 1-minute load at its start), then per workload and
destination the medians of each tree and the median of the pairs' new/old ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dlt import BIG, Bench, generate, settle  # noqa: E402 - sibling script
from instances import Instances  # noqa: E402
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402


class TreeBench(Bench):
    """compare_dlt's Bench whose incsync processes (worker and client) import incsync from ``tree``."""

    tree: Path | None = None
    ready = 0.0  # seconds the last worker took to answer

    def start_worker(self, config: Path):  # noqa: ANN201 - compare_dlt's Worker
        started = time.monotonic()
        worker = super().start_worker(config)
        self.ready = time.monotonic() - started
        return worker

    def incsync_env(self, config: Path) -> dict[str, str]:
        env = super().incsync_env(config)
        return {**env, "PYTHONPATH": str(self.tree)} if self.tree else env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--destinations", default="delta,postgres")
    parser.add_argument("--tenant-rows", type=int, default=500_000)
    parser.add_argument("--c-tenants", type=int, default=200)
    parser.add_argument("--c-rows", type=int, default=5_000_000)
    parser.add_argument("--data-days", type=int, default=30)
    parser.add_argument("--model-start", default="2025-01-01")
    parser.add_argument("--instance", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument("--max-load", type=float, help="wait (--max-wait s at most) for the 1-minute load to fall below this")
    parser.add_argument("--max-wait", type=float, default=120)
    parser.add_argument("--json")
    args = parser.parse_args()
    trees = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    bench_args = argparse.Namespace(config="all", queries=1, port=15077, no_change=False)
    work = Path(tempfile.mkdtemp(prefix="incsync-pairs-"))
    user = pg_user()
    source_db, dest_db = f"incsync_pairs_src_{uuid.uuid4().hex[:6]}", f"incsync_pairs_dst_{uuid.uuid4().hex[:6]}"
    now = datetime.now(timezone.utc)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if today + timedelta(days=1) - now < timedelta(minutes=90):
        sys.exit("run this before 22:30 UTC: B's changes must land in today's window")
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    instances = Instances(host=HOST, port=PORT, user=user)
    runs: list[dict[str, object]] = []
    try:
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        t0 = time.monotonic()
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
            sizes = generate(conn, tenant_rows=args.tenant_rows, c_tenants=args.c_tenants,
                             c_rows=args.c_rows if args.c_tenants else 0,
                             start=today - timedelta(days=args.data_days), end=now - timedelta(minutes=10))
        print(f"generated {sum(sizes.values()):,} rows ({len(sizes)} tenants) in {time.monotonic() - t0:.0f} s", flush=True)
        model_start = datetime.fromisoformat(args.model_start).replace(tzinfo=timezone.utc)
        bench = TreeBench(bench_args, work, user, source_db, dest_db, model_start, instances, sizes)
        bench.data_end = now - timedelta(minutes=10)
        for pair in range(args.pairs):
            for destination in args.destinations.split(","):
                for label in (("old", "new") if pair % 2 == 0 else ("new", "old")):
                    if args.max_load is not None:
                        deadline = time.monotonic() + args.max_wait
                        while os.getloadavg()[0] > args.max_load and time.monotonic() < deadline:
                            time.sleep(5)
                    settle(admin)
                    bench.tree = trees[label]
                    load = os.getloadavg()[0]
                    before = len(bench.samples)
                    bench.a_and_b(destination, "worker", "sqlite" if args.instance == "sqlite" else "postgres", pair,
                                  args.tenant_rows)
                    for s in bench.samples[before:]:
                        runs.append({"tree": label, "pair": pair, "workload": s.workload, "destination": destination,
                                     "wall": s.wall, "rows": s.rows, "py_mb": s.py_rss / 2**20, "jvm_mb": s.jvm_rss / 2**20,
                                     "ready": bench.ready,
                                     "load": load})
                        print(f"pair {pair} {label} {s.workload} {destination}: {s.wall:.2f} s, load {load:.1f}", flush=True)
    finally:
        instances.close()
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.pairs} pairs, {BIG} {args.tenant_rows:,} rows among {sum(sizes.values()):,}; config of {len(sizes)} "
          f"recipients; README worker (local Spark); {args.instance} instance; load (1 min) "
          f"{min(float(r['load']) for r in runs):.1f}-{max(float(r['load']) for r in runs):.1f}")
    ready = {t: statistics.median(float(r["ready"]) for r in runs if r["tree"] == t and r["workload"] == "A") for t in ("old", "new")}
    print(f"worker ready (start to its socket) median: old {ready['old']:.1f} s, new {ready['new']:.1f} s")
    print("| workload | destination | old median s | new median s | new/old, median of pairs (min-max) | old py/JVM MB | new py/JVM MB |")
    print("|---|---|---|---|---|---|---|")
    for workload in ("A", "B"):
        for destination in args.destinations.split(","):
            mine = [r for r in runs if r["workload"] == workload and r["destination"] == destination]
            by = {t: [r for r in mine if r["tree"] == t] for t in ("old", "new")}
            ratios = [n["wall"] / o["wall"] for o in by["old"] for n in by["new"] if n["pair"] == o["pair"]]
            if not ratios:
                continue
            med = {t: statistics.median(float(r["wall"]) for r in rs) for t, rs in by.items()}
            mem = {t: "/".join(f"{statistics.median(float(r[k]) for r in rs):,.0f}" for k in ("py_mb", "jvm_mb")) for t, rs in by.items()}
            print(f"| {workload} | {destination} | {med['old']:.2f} | {med['new']:.2f} | {statistics.median(ratios):.2f}× "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) | {mem['old']} | {mem['new']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

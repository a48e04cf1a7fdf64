"""B as a cron entry runs it: `incsync transfer orders --recipient big` in a fresh process, cold (`--no-worker`:
a JVM and Dagster per call) against the same command handing its transfer to the worker it starts on first use
(incsync.worker.auto; the first call starts it, the second and later calls are measured).

The shape is compare_dlt.py's (its ``generate``): one tenant ``big`` of ``--tenant-rows`` rows, updated_at spread
from 2025-01-01 to now, an index on (tenant, updated_at); product defaults (daily windows, one query per
transfer, local Spark); a Delta or PostgreSQL destination. A first backfill (cold, not measured), then per
measured call 1 % of the tenant changed a minute later (compare_dlt's ``change``) and one incremental.

    .venv/bin/python benchmarks/auto_worker.py [--tenant-rows 500000] [--reps 3] [--destination delta]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dlt import BIG, generate, measure  # noqa: E402 - sibling script
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

BIN = Path(sys.executable).parent


def change(dsn: str, round_: int, fraction: float, tenant_rows: int, data_end: datetime) -> None:
    n = max(1, int(tenant_rows * fraction))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """UPDATE orders SET status = 'changed', amount = amount + 1,
                      updated_at = %s::timestamptz + (id %% 1000) * interval '1 millisecond'
               WHERE id IN (SELECT id FROM orders WHERE organization_id = %s ORDER BY id OFFSET %s LIMIT %s)""",
            # two seconds ago, never ahead of the clock: a future-dated row is read again by every transfer
            (datetime.now(UTC) - timedelta(seconds=2), BIG, (round_ * n) % max(1, tenant_rows - n), n),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenant-rows", type=int, default=500_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--destination", choices=("delta", "postgres"), default="delta")
    args = parser.parse_args()
    user = pg_user()
    tag = uuid.uuid4().hex[:8]
    source_db, dest_db = f"bench_auto_src_{tag}", f"bench_auto_dst_{tag}"
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    for db in (source_db, dest_db):
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    work = Path(tempfile.mkdtemp(prefix="bench-auto-"))
    runtime = Path(tempfile.mkdtemp(prefix="ba-", dir="/tmp"))
    start = datetime(2025, 1, 1, tzinfo=UTC)
    data_end = datetime.now(UTC) - timedelta(minutes=60)  # each round's changes a minute later, all in the past
    try:
        src = f"postgresql://{user}@{HOST}:{PORT}/{source_db}"
        with psycopg.connect(src, autocommit=True) as conn:
            generate(conn, tenant_rows=args.tenant_rows, c_tenants=0, c_rows=0, start=start, end=data_end)
        destination = ({"name": "d_big", "kind": "delta", "path": str(work / "out" / BIG)} if args.destination == "delta"
                       else {"name": "d_big", "kind": "postgres", "dsn_env": "BENCH_DEST_DSN", "schema": BIG})
        config = work / "incsync.yaml"
        config.write_text(yaml.safe_dump({
            "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{source_db}",
                         "user": user}],
            "destinations": [destination],
            "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                        "last_modified_column": "updated_at", "organization_column": "organization_id",
                        "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(start.timestamp())}],
            "recipients": [{"id": BIG, "id_in_provider_system": BIG, "destination": "d_big"}],
        }, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k not in ("INCSYNC_CONFIG", "INCSYNC_WORKER", "INCSYNC_AUTO_WORKER")}
        env |= {"DAGSTER_HOME": str(work / ".dagster"), "INCSYNC_STAGING_DIR": str(work / "staging"),
                "BENCH_DEST_DSN": f"postgresql://{user}@{HOST}:{PORT}/{dest_db}", "XDG_RUNTIME_DIR": str(runtime)}
        if args.destination == "postgres":
            with psycopg.connect(env["BENCH_DEST_DSN"], autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {BIG}")
        cli = [str(BIN / "incsync"), "transfer", "orders", "--recipient", BIG, "-c", str(config)]
        wall, *_ = measure([*cli, "--backfill", "--no-worker"], env)
        print(f"A backfill (cold, not measured): {wall:.2f} s", flush=True)
        round_ = 0
        results: dict[str, list[float]] = {"cold": [], "auto first": [], "auto": [], "README worker": []}
        manual = runtime / "manual.sock"
        plan = [("cold", ["--no-worker"], args.reps), ("auto first", [], 1), ("auto", [], args.reps),
                ("README worker", ["--worker", str(manual)], args.reps)]
        for kind, extra, reps in plan:
            if kind == "README worker":  # `incsync worker -c incsync.yaml`, as the README runs it, beside the auto one
                readme = subprocess.Popen([str(BIN / "incsync"), "worker", "-c", str(config), "--socket", str(manual)],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                assert readme.stdout is not None
                for line in readme.stdout:
                    if line.strip().startswith("export INCSYNC_WORKER="):
                        break
            for _ in range(reps):
                round_ += 1
                change(src, round_, 0.01, args.tenant_rows, data_end)
                wall, py, jvm, tree, out = measure([*cli, *extra], env)
                results[kind].append(wall)
                rows = [w for line in out.splitlines() for w in line.split() if w.startswith("rows_transferred=")]
                print(f"B {kind}: {wall:.2f} s, {rows}, peak tree {tree / 1e6:.0f} MB", flush=True)
        for kind, walls in results.items():
            print(f"{kind}: median {statistics.median(walls):.2f} s of {[round(w, 2) for w in walls]}")
        auto = statistics.median(results["auto"])
        print(f"second and later calls through the worker / cold: {auto / statistics.median(results['cold']):.2f}x, "
              f"/ the README's worker: {auto / statistics.median(results['README worker']):.2f}x")
        readme.terminate()
        readme.wait(timeout=60)
    finally:
        for pid_file in (runtime / "incsync").glob("*.pid") if (runtime / "incsync").exists() else []:
            pid = int(pid_file.read_text())
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(200):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.1)
        subprocess.run(["rm", "-rf", str(work), str(runtime)], check=False)
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.close()


if __name__ == "__main__":
    main()

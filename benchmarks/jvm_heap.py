"""Benchmark: what heap Spark's embedded JVM needs to stage a tenant, and what it costs in RSS.

Generates the skewed table of ``jdbc_postgres.py`` once (plus a copy of the largest tenant with a
``--wide-bytes`` jsonb column), then for each JVM setting × read runs one backfill of every window in a
FRESH process (a JVM's heap size is fixed when it starts) and prints: the JVM's max heap as the JVM
reports it, its peak RSS (VmHWM of the java child), the Python process's peak RSS, the wall time of
the backfill, and whether it succeeded. Not part of the test suite:

    .venv/bin/python benchmarks/jvm_heap.py [--rows 1000000 --tenants 50 --days 7 --wide-bytes 2048]
        [--setting default --setting spark.driver.memory=512m ...] [--reads big,small,wide --queries 1]

``default`` is what incsync's session settings give; a setting is ``key=value[;key=value...]`` of Spark
settings, as in the config file's ``spark:``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from datetime import timedelta
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))
from jdbc_postgres import HOST, PORT, START, generate, pg_user  # noqa: E402

DEFAULT_SETTINGS = ["default", "spark.driver.memory=512m", "spark.driver.memory=768m", "spark.driver.memory=1g",
                    "spark.driver.memory=2g"]


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def java_children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read()
                if int(fields.rsplit(")", 1)[1].split()[1]) == pid and "(java)" in fields:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def child(args: argparse.Namespace) -> None:
    """One backfill in this process; prints one JSON line."""
    warnings.simplefilter("ignore")
    import dagster as dg
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    from incsync.config.load import load_config
    from incsync.operations.runs import run_transfers
    from incsync.orchestration.definitions import build_definitions

    work = Path(args.workdir)
    os.environ["INCSYNC_STAGING_DIR"] = str(work / "staging")
    config = work / "incsync.yaml"
    defs = build_definitions(config)
    spark_conf = defs.resources["spark"].spark_config  # what a run of this file starts its session with
    builder = SparkSession.builder
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    t = time.monotonic()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.monotonic() - t
    max_heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() >> 20
    cfg = load_config(config)
    windows = [(START + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(args.days)]
    error, moved = None, 0
    (work / "home").mkdir()
    t = time.monotonic()
    with dg.instance_for_test(temp_dir=str(work / "home")) as instance:
        try:
            lines = run_transfers(defs, instance, config=cfg, model=cfg.model("orders"), recipient=cfg.recipient("r"),
                                  windows=windows)
            moved = sum(line.rows_transferred or 0 for line in lines)
            error = next((str(line.error)[:200] for line in lines if not line.ok), None)
        except Exception as exc:  # noqa: BLE001 - reported as the setting's result
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
    wall = time.monotonic() - t
    landed = DeltaTable(str(work / "out" / "orders")).to_pyarrow_dataset().count_rows() if not error else 0
    jvm = java_children(os.getpid())
    print(json.dumps({
        "max_heap_mb": max_heap, "startup_s": round(startup, 1), "wall_s": round(wall, 1), "moved": moved,
        "landed": landed, "error": error,
        "jvm_hwm_mb": status_kb(jvm[0], "VmHWM") >> 10 if jvm else None,
        "py_hwm_mb": status_kb(os.getpid(), "VmHWM") >> 10,
    }), flush=True)
    spark.stop()


def write_config(work: Path, *, db: str, user: str, table: str, tenant: str, queries: int, spark: dict[str, str]) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "incsync.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{db}",
                     "user": user, "max_concurrent_queries_per_transfer": queries}],
        "destinations": [{"name": "d", "kind": "delta", "path": str(work / "out")}],
        "models": [{"model_name": "orders", "source": "app_db", "source_table": table, "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(START.timestamp())}],
        "recipients": [{"id": "r", "id_in_provider_system": tenant, "destination": "d"}],
        **({"spark": spark} if spark else {}),
    }, sort_keys=False))


def make_wide(conn: psycopg.Connection, tenant: str, width: int) -> None:
    """The tenant's rows with an incompressible jsonb text of ``width`` bytes each."""
    conn.execute(sql.SQL(
        """CREATE TABLE orders_wide AS SELECT id, organization_id, status, amount,
           payload || jsonb_build_object('blob', (SELECT string_agg(md5(o.id::text || i::text), '')
                                                  FROM generate_series(1, {n}) i)) AS payload, updated_at
           FROM orders o WHERE organization_id = %s""").format(n=sql.Literal(max(1, width // 32))), (tenant,))
    conn.execute("ALTER TABLE orders_wide ADD PRIMARY KEY (id)")
    conn.execute("CREATE INDEX orders_wide_tenant_lm ON orders_wide (organization_id, updated_at)")
    conn.execute("ANALYZE orders_wide")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--wide-bytes", type=int, default=2048, help="bytes of jsonb per row in the wide read")
    parser.add_argument("--setting", action="append", help="'default' or 'key=value[;key=value]' (repeatable)")
    parser.add_argument("--reads", default="big,small,wide", help="big: largest tenant; small: the largest tenant "
                        "under the collect cap (50,000 rows); wide: the largest tenant with the wide jsonb")
    parser.add_argument("--queries", type=int, default=1, help="max_concurrent_queries_per_transfer")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    root = Path(tempfile.mkdtemp(prefix="incsync-jvm-"))
    user, db = pg_user(), f"incsync_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    try:
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=db, autocommit=True) as conn:
            sizes = generate(conn, rows=args.rows, tenants=args.tenants, days=args.days)
            if "wide" in args.reads:
                make_wide(conn, sizes[0][0], args.wide_bytes)
        small = next((t, n) for t, n in sizes if n <= 50_000)
        reads = {"big": ("public.orders", *sizes[0]), "small": ("public.orders", *small),
                 "wide": ("public.orders_wide", *sizes[0])}
        print(f"{os.cpu_count()} cores; reads: " + ", ".join(f"{r}={reads[r][2]:,} rows" for r in args.reads.split(",")))
        print(f"{'read':<6}{'setting':<58}{'Xmx MB':>8}{'JVM peak MB':>12}{'py peak MB':>11}{'start s':>8}"
              f"{'wall s':>8}{'rows':>9}  load  result")
        for setting in args.setting or DEFAULT_SETTINGS:
            spark = {} if setting == "default" else dict(kv.split("=", 1) for kv in setting.split(";"))
            for read in args.reads.split(","):
                table, tenant, rows = reads[read]
                work = root / uuid.uuid4().hex[:8]
                write_config(work, db=db, user=user, table=table, tenant=tenant, queries=args.queries, spark=spark)
                done = subprocess.run([sys.executable, __file__, "--child", "--workdir", str(work), "--days", str(args.days)],
                                      capture_output=True, text=True)
                line = next((x for x in done.stdout.splitlines() if x.startswith("{")), None)
                if line is None:
                    print(f"{read:<6}{setting:<58} process failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(line)
                ok = "ok" if not r["error"] and r["landed"] == rows else f"FAILED {r['error'] or r['landed']}"
                print(f"{read:<6}{setting:<58}{r['max_heap_mb']:>8}{r['jvm_hwm_mb'] or 0:>12}{r['py_hwm_mb']:>11}"
                      f"{r['startup_s']:>8}{r['wall_s']:>8}{r['moved']:>9,}  {os.getloadavg()[0]:4.1f}  {ok}", flush=True)
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.close()


if __name__ == "__main__":
    main()

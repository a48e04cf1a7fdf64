"""Benchmark (issue 33): does a transfer's memory follow the batch or the tenant?

One PostgreSQL ``orders`` table holds tenant ``big`` (``--big-rows``, default 3,000,000) and ``small``
(a tenth of it), spread over the last ``--data-days`` days, on a daily grid that starts
``--history-days`` before them (the product's defaults: a model start long before the data). For each
destination (Delta, PostgreSQL) and each tenant, as a user runs them, one CLI process per command:
  backfill     ``incsync transfer orders --recipient R --backfill`` (embedded Spark, a cold JVM)
  incremental  ``--scattered`` rows of the tenant changed at random keys, then ``incsync transfer``
and prints wall time, the peak RSS of the Python process, of its JVM and of the whole tree, the
ratio big/small of each, and what the incremental rewrote (Delta: files and bytes, from its metadata).

    .venv/bin/python benchmarks/big_tenant.py [--big-rows 3000000] [--destinations delta,postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))
from compare_dlt import BIN, HOST, PORT, measure  # noqa: E402 - the harness's process-tree sampling


def generate(conn: psycopg.Connection, sizes: dict[str, int], *, start: datetime, end: datetime) -> None:
    conn.execute("""CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, status text,
                    amount numeric(12,2), payload jsonb, updated_at timestamptz(6) NOT NULL)""")
    span, first = int((end - start).total_seconds()), 0
    for tenant, n in sizes.items():
        conn.execute(
            """INSERT INTO orders SELECT g, %s, (ARRAY['new','paid','shipped'])[1 + g %% 3], (g %% 10000) / 100.0,
                      jsonb_build_object('n', g, 'tag', 'x' || (g %% 7)),
                      %s::timestamptz + ((g * 7919) %% %s) * interval '1 second'
               FROM generate_series(%s::bigint, %s::bigint) g""", (tenant, start, span - 1, first + 1, first + n))
        first += n
    conn.execute("CREATE INDEX orders_tenant_lm ON orders (organization_id, updated_at)")
    conn.execute("VACUUM ANALYZE orders")


def config_file(folder: Path, *, destination: str, source_db: str, user: str, start: datetime,
                spark: dict[str, str] | None = None) -> Path:
    destinations, recipients = [], []
    for r in ("big", "small"):
        if destination == "delta":
            destinations.append({"name": f"d_{r}", "kind": "delta", "path": str(folder / "out" / r)})
        else:
            destinations.append({"name": f"d_{r}", "kind": "postgres", "dsn_env": "BENCH_DEST_DSN", "schema": f"bt_{r}"})
        recipients.append({"id": r, "id_in_provider_system": r, "destination": f"d_{r}"})
    doc = {"sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{source_db}",
                        "user": user}],
           "destinations": destinations,
           "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                       "last_modified_column": "updated_at", "organization_column": "organization_id",
                       "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(start.timestamp())}],
           "recipients": recipients, **({"spark": spark} if spark else {})}
    path = folder / "incsync.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def delta_rewrite(table: Path) -> str:
    """What the table's newest data commit removed (rewrote) and added: ``files (MB)``."""
    for log in sorted((table / "_delta_log").glob("*.json"), reverse=True):
        actions = [json.loads(line) for line in log.read_text().splitlines()]
        removed = [a["remove"].get("size", 0) for a in actions if "remove" in a]
        added = [a["add"]["size"] for a in actions if "add" in a]
        if removed or added:
            total = sum(f.stat().st_size for f in table.glob("*.parquet"))
            return (f"{len(removed)} files ({sum(removed) / 1e6:.1f} MB) rewritten into {len(added)} "
                    f"({sum(added) / 1e6:.1f} MB); folder {total / 1e6:.0f} MB")
    return "no data commit"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-rows", type=int, default=3_000_000)
    parser.add_argument("--scattered", type=int, default=300, help="rows changed at random keys before the incremental")
    parser.add_argument("--data-days", type=int, default=30)
    parser.add_argument("--history-days", type=int, default=665)
    parser.add_argument("--destinations", default="delta,postgres")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--spark", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the config file, e.g. spark.driver.memory=512m (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the databases and configs (to profile a command)")
    args = parser.parse_args()
    user = os.environ.get("PGUSER", "postgres")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="incsync-big-tenant-"))
    now = datetime.now(timezone.utc)
    data_start = now - timedelta(days=args.data_days)
    sizes = {"big": args.big_rows, "small": args.big_rows // 10}
    source_db, dest_db = f"incsync_bt_src_{uuid.uuid4().hex[:6]}", f"incsync_bt_dst_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    results = []
    try:
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
            generate(conn, sizes, start=data_start, end=now - timedelta(minutes=10))
        for destination in args.destinations.split(","):
            folder = work / destination
            config = config_file(folder, destination=destination, source_db=source_db, user=user,
                                 start=data_start - timedelta(days=args.history_days),
                                 spark=dict(kv.split("=", 1) for kv in args.spark))
            env = {**os.environ, "DAGSTER_HOME": str(folder / ".dagster"), "INCSYNC_STAGING_DIR": str(folder / "staging"),
                   "BENCH_DEST_DSN": f"postgresql://{user}@{HOST}:{PORT}/{dest_db}"}
            for tenant in ("small", "big"):
                admin.execute("CHECKPOINT")
                base = [str(BIN / "incsync"), "transfer", "orders", "--recipient", tenant, "--no-worker", "-c", str(config)]
                wall, py, jvm, tree, _ = measure([*base, "--backfill"], env)
                results.append((destination, tenant, "backfill", wall, py, jvm, tree, ""))
                print(results[-1], flush=True)
                with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
                    conn.execute("""UPDATE orders SET status = 'changed', updated_at = now() - interval '1 minute'
                                    WHERE id IN (SELECT id FROM orders WHERE organization_id = %s
                                                 ORDER BY random() LIMIT %s)""", (tenant, args.scattered))
                admin.execute("CHECKPOINT")
                wall, py, jvm, tree, _ = measure(base, env)
                rewrote = delta_rewrite(folder / "out" / tenant / "orders") if destination == "delta" else ""
                results.append((destination, tenant, "incremental", wall, py, jvm, tree, rewrote))
                print(results[-1], flush=True)
    finally:
        for db in (source_db, dest_db):
            if args.keep:
                print(f"kept database {db}; configs under {work}")
            else:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    print("\n| destination | tenant | phase | wall s | py MB | JVM MB | tree MB | Delta files/bytes rewritten |")
    print("|---|---|---|---|---|---|---|---|")
    for d, t, phase, wall, py, jvm, tree, rewrote in results:
        print(f"| {d} | {t} ({sizes[t]:,}) | {phase} | {wall:.1f} | {py / 2**20:,.0f} | {jvm / 2**20:,.0f} | "
              f"{tree / 2**20:,.0f} | {rewrote} |")
    for d in args.destinations.split(","):
        for phase in ("backfill", "incremental"):
            small = next(r for r in results if r[:3] == (d, "small", phase))
            big = next(r for r in results if r[:3] == (d, "big", phase))
            print(f"{d} {phase}: big/small time {big[3] / small[3]:.2f}x, py {big[4] / small[4]:.2f}x, "
                  f"JVM {big[5] / max(small[5], 1):.2f}x, tree {big[6] / small[6]:.2f}x")


if __name__ == "__main__":
    main()

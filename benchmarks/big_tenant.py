"""Benchmark (issue 33): does a transfer's memory follow the batch or the tenant?

One PostgreSQL ``orders`` table holds tenant ``big`` (``--big-rows``, default 3,000,000) and ``small``
(a tenth of it), spread over the last ``--data-days`` days, on a daily grid that starts
``--history-days`` before them (the product's defaults: a model start long before the data). For each
destination (Delta, PostgreSQL) and each tenant, as a user runs them, one CLI process per command:
  backfill     ``incsync transfer orders --recipient R --backfill`` (embedded Spark, a cold JVM)
  incremental  ``--scattered`` rows of the tenant changed at random keys, then ``incsync transfer``
and prints wall time, the peak RSS of the Python process, of its JVM and of the whole tree, the
ratio big/small of each, and what the incremental rewrote (Delta: files and bytes, from its metadata).
``--shape wide10`` is issue 46's table (10 columns, a 65-character text); ``--runs`` repeats the commands
into fresh destinations and prints the median ratio.

    .venv/bin/python benchmarks/big_tenant.py [--big-rows 3000000] [--destinations delta,postgres]
    .venv/bin/python benchmarks/big_tenant.py --shape wide10 --backfill-only --model-start 2025-01-01 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

# Each shape: the table's DDL and the INSERT … SELECT of one tenant's rows from generate_series(g), its
# parameters the tenant, the data's start, its span in seconds - 1, the first and last id.
SHAPES = {
    # compare_dlt.py's table, 6 columns (issue 33's runs)
    "orders6": ("""CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL, status text,
                   amount numeric(12,2), payload jsonb, updated_at timestamptz(6) NOT NULL)""",
                """INSERT INTO orders SELECT g, %s, (ARRAY['new','paid','shipped'])[1 + g %% 3], (g %% 10000) / 100.0,
                          jsonb_build_object('n', g, 'tag', 'x' || (g %% 7)),
                          %s::timestamptz + ((g * 7919) %% %s) * interval '1 second'
                   FROM generate_series(%s::bigint, %s::bigint) g"""),
    # issue 46's: 10 columns (bigint, text, two timestamptz, bigint, text, numeric(12,2), integer, boolean,
    # text), the last a 65-character text that does not repeat row to row
    "wide10": ("""CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text NOT NULL,
                  created_at timestamptz(6) NOT NULL, updated_at timestamptz(6) NOT NULL, customer_id bigint,
                  status text, amount numeric(12,2), quantity integer, paid boolean, note text)""",
               """INSERT INTO orders SELECT g, %s, t - interval '3 days', t, g %% 50000,
                         (ARRAY['new','paid','shipped','cancelled'])[1 + g %% 4], (g %% 100000) / 100.0, (g %% 17)::int,
                         g %% 3 = 0, 'n' || md5(g::text) || md5((g * 31)::text)
                  FROM (SELECT g, %s::timestamptz + ((g * 7919) %% %s) * interval '1 second' AS t
                        FROM generate_series(%s::bigint, %s::bigint) g) s"""),
}


def generate(conn: psycopg.Connection, sizes: dict[str, int], *, start: datetime, end: datetime,
             shape: str = "orders6") -> None:
    create, insert = SHAPES[shape]
    conn.execute(create)
    span, first = int((end - start).total_seconds()), 0
    for tenant, n in sizes.items():
        conn.execute(insert, (tenant, start, span - 1, first + 1, first + n))
        first += n
    conn.execute("CREATE INDEX orders_tenant_lm ON orders (organization_id, updated_at)")


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
    parser.add_argument("--shape", choices=sorted(SHAPES), default="orders6",
                        help="orders6: compare_dlt.py's 6 columns; wide10: issue 46's 10 columns with a 65-character text")
    parser.add_argument("--scattered", type=int, default=300, help="rows changed at random keys before the incremental")
    parser.add_argument("--backfill-only", action="store_true", help="no incremental after each backfill")
    parser.add_argument("--runs", type=int, default=1, help="repetitions into fresh destinations; medians of the ratios")
    parser.add_argument("--data-days", type=int, default=30)
    parser.add_argument("--history-days", type=int, default=665)
    parser.add_argument("--model-start", help="instead of --history-days: the model's daily windows start here (UTC date)")
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
    model_start = (datetime.fromisoformat(args.model_start).replace(tzinfo=timezone.utc) if args.model_start
                   else data_start - timedelta(days=args.history_days))
    sizes = {"big": args.big_rows, "small": args.big_rows // 10}
    source_db = f"incsync_bt_src_{uuid.uuid4().hex[:6]}"
    dest_dbs = [f"incsync_bt_dst_{uuid.uuid4().hex[:6]}" for _ in range(args.runs)]
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    phases = ("backfill",) if args.backfill_only else ("backfill", "incremental")
    results = []
    try:
        for db in (source_db, *dest_dbs):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
            generate(conn, sizes, start=data_start, end=now - timedelta(minutes=10), shape=args.shape)
            conn.execute("VACUUM ANALYZE orders")
        print(f"shape {args.shape}: {sizes}, model start {model_start:%Y-%m-%d}, {os.getloadavg()[0]:.1f} load", flush=True)
        for run, dest_db in enumerate(dest_dbs, 1):
            for destination in args.destinations.split(","):
                folder = work / f"run{run}" / destination
                config = config_file(folder, destination=destination, source_db=source_db, user=user,
                                     start=model_start, spark=dict(kv.split("=", 1) for kv in args.spark))
                env = {**os.environ, "DAGSTER_HOME": str(folder / ".dagster"),
                       "INCSYNC_STAGING_DIR": str(folder / "staging"),
                       "BENCH_DEST_DSN": f"postgresql://{user}@{HOST}:{PORT}/{dest_db}"}
                for tenant in ("small", "big"):
                    admin.execute("CHECKPOINT")
                    base = [str(BIN / "incsync"), "transfer", "orders", "--recipient", tenant, "--no-worker", "-c", str(config)]
                    load = os.getloadavg()[0]
                    wall, py, jvm, tree, _ = measure([*base, "--backfill"], env)
                    results.append((run, destination, tenant, "backfill", wall, py, jvm, tree, f"load {load:.1f}"))
                    print(results[-1], flush=True)
                    if args.backfill_only:
                        continue
                    with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
                        conn.execute("""UPDATE orders SET status = 'changed', updated_at = now() - interval '1 minute'
                                        WHERE id IN (SELECT id FROM orders WHERE organization_id = %s
                                                     ORDER BY random() LIMIT %s)""", (tenant, args.scattered))
                    admin.execute("CHECKPOINT")
                    wall, py, jvm, tree, _ = measure(base, env)
                    rewrote = delta_rewrite(folder / "out" / tenant / "orders") if destination == "delta" else ""
                    results.append((run, destination, tenant, "incremental", wall, py, jvm, tree, rewrote))
                    print(results[-1], flush=True)
    finally:
        for db in (source_db, *dest_dbs):
            if args.keep:
                print(f"kept database {db}; configs under {work}")
            else:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    print("\n| run | destination | tenant | phase | wall s | py MB | JVM MB | tree MB | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run, d, t, phase, wall, py, jvm, tree, note in results:
        print(f"| {run} | {d} | {t} ({sizes[t]:,}) | {phase} | {wall:.1f} | {py / 2**20:,.0f} | {jvm / 2**20:,.0f} | "
              f"{tree / 2**20:,.0f} | {note} |")
    for d in args.destinations.split(","):
        for phase in phases:
            ratios = []
            for run in range(1, args.runs + 1):
                small = next(r for r in results if r[:4] == (run, d, "small", phase))
                big = next(r for r in results if r[:4] == (run, d, "big", phase))
                ratios.append(big[7] / small[7])
                print(f"run {run} {d} {phase}: big/small time {big[4] / small[4]:.2f}x, py {big[5] / small[5]:.2f}x, "
                      f"JVM {big[6] / max(small[6], 1):.2f}x, tree {big[7] / small[7]:.2f}x")
            print(f"{d} {phase}: tree big/small median {statistics.median(ratios):.2f}x "
                  f"({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()

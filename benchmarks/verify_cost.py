"""What `incsync verify` costs with nothing wrong, against workload B's incremental transfer (issue 15).

```
.venv/bin/python benchmarks/verify_cost.py --tenant-rows 500000 --repeat 3
```
One PostgreSQL source (compare_dlt.py's generator: tenant ``big``, ``id bigint`` PK, text, numeric(12,2),
jsonb, timestamptz(6)) copied to a Delta table and to a PostgreSQL schema. Then, in ONE warm process
(a local Spark session already started, as in a Dagster code server or the worker), per repetition:
- **B**: 1% of the tenant changed (5,000 contiguous keys), then the scheduled incremental transfer of
  each destination (`runner.run_transfers`, a Dagster run as `incsync transfer` makes);
- **verify**: `verify_recipient` of each destination (sampling rate 1): one aggregate query on the source,
  one on PostgreSQL or a DataFusion pass over the Delta table; nothing differs, so no row is read twice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dlt import BIG, generate  # noqa: E402 - sibling script
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenant-rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="incsync-verify-cost-"))
    user = pg_user()
    src, dst = f"incsync_vc_src_{uuid.uuid4().hex[:6]}", f"incsync_vc_dst_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    for db in (src, dst):
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    now = datetime.now(timezone.utc)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    try:
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=src, autocommit=True) as conn:
            generate(conn, tenant_rows=args.tenant_rows, c_tenants=0, c_rows=0, start=start, end=now - timedelta(minutes=10))
        os.environ.update(BENCH_DEST_DSN=f"postgresql://{user}@{HOST}:{PORT}/{dst}", DAGSTER_HOME=str(work / ".dagster"),
                          INCSYNC_STAGING_DIR=str(work / "staging"))
        doc = {
            "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{src}", "user": user}],
            "destinations": [{"name": "to_delta", "kind": "delta", "path": str(work / "out")},
                             {"name": "to_pg", "kind": "postgres", "dsn_env": "BENCH_DEST_DSN", "schema": "big"}],
            "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                        "last_modified_column": "updated_at", "organization_column": "organization_id",
                        "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(start.timestamp())}],
            "recipients": [{"id": "delta", "id_in_provider_system": BIG, "destination": "to_delta"},
                           {"id": "pg", "id_in_provider_system": BIG, "destination": "to_pg"}],
            "spark": {"spark.master": "local[*]"},
        }
        config_file = work / "incsync.yaml"
        config_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        run(args, config_file, dsn=f"postgresql://{user}@{HOST}:{PORT}/{src}")
    finally:
        for db in (src, dst):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def run(args: argparse.Namespace, config_file: Path, *, dsn: str) -> None:
    from incsync.config.load import load_config
    from incsync.core.windows import recipient_windows, scheduled_windows
    from incsync.integrity.verify import verify_recipient
    from incsync.operations.instance import dagster_instance
    from incsync.operations.runs import run_transfers
    from incsync.orchestration.definitions import build_definitions

    config = load_config(config_file)
    model = config.model("orders")
    defs, instance = build_definitions(config_file), dagster_instance(config_file)
    for r in config.recipients:
        t = time.monotonic()
        run_transfers(defs, instance, config=config, model=model, recipient=r, windows=[w.key for w in recipient_windows(model, r)])
        print(f"backfill {r.id}: {time.monotonic() - t:.1f} s", flush=True)
    times: dict[tuple[str, str], list[float]] = {}
    reads: list[int] = []
    n = max(1, args.tenant_rows // 100)
    for rep in range(args.repeat):
        stamp = datetime.now(timezone.utc) - timedelta(seconds=5)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                """UPDATE orders SET status = 'changed', amount = amount + 1, updated_at = %s
                   WHERE id IN (SELECT id FROM orders WHERE organization_id = %s ORDER BY id OFFSET %s LIMIT %s)""",
                (stamp, BIG, (rep * n) % max(1, args.tenant_rows - n), n),
            )
        for r in config.recipients:
            t = time.monotonic()
            run_transfers(defs, instance, config=config, model=model, recipient=r, windows=[w.key for w in scheduled_windows(model)], scheduled=True)
            times.setdefault(("B", r.id), []).append(time.monotonic() - t)
        for r in config.recipients:
            t = time.monotonic()
            result = verify_recipient(config, model, r, spark=lambda: None, staging_root=work_staging())  # type: ignore[arg-type,return-value]
            times.setdefault(("verify", r.id), []).append(time.monotonic() - t)
            assert result.passed and result.buckets_differing == 0, result.line()
            reads.append(result.source_reads)
            print(result.line(), f"{times[('verify', r.id)][-1]:.2f} s", flush=True)
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; source reads per verify: {set(reads)}")
    print("| destination | B incremental s, median (min-max) | verify s, median (min-max) | verify ÷ B |")
    print("|---|---|---|---|")
    for r in config.recipients:
        b, v = times[("B", r.id)], times[("verify", r.id)]
        print(f"| {r.destination} | {statistics.median(b):.2f} ({min(b):.2f}-{max(b):.2f}) | "
              f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | {statistics.median(v) / statistics.median(b):.2f} |")


def work_staging() -> Path:
    return Path(os.environ["INCSYNC_STAGING_DIR"])


if __name__ == "__main__":
    main()

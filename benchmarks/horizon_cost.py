"""What the safe horizon query costs an incremental run (issue 20): medians of a few timings.

Times `source.horizon()` alone (PostgreSQL through psycopg, MariaDB through Spark JDBC) and a whole
scheduled transfer of the open window with `safe_horizon` on and off, in one warm process.

    PYTHONPATH=. .venv/bin/python benchmarks/horizon_cost.py [--runs 7] [--rows 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from incsync.config.load import load_config
from incsync.spark.session import spark_config
from incsync_tests.sources.test_horizon_sources import Runner, today_config
from incsync_tests.support.jdbc import maria_database, pg_database


def median_ms(runs: int, fn: Callable[[], object]) -> float:
    fn()  # warm
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spark_config({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    with pg_database() as db, tempfile.TemporaryDirectory() as tmp:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, updated_at timestamptz(6) NOT NULL DEFAULT now())")
        db.execute(
            "INSERT INTO orders SELECT g, 'org_' || (g % 10), now() - (g || ' milliseconds')::interval "
            f"FROM generate_series(1, {args.rows}) g"
        )
        db.execute("CREATE INDEX ON orders (organization_id, updated_at)")
        for switch in (True, False):
            root = Path(tmp) / str(switch)
            root.mkdir()
            run = Runner(today_config(root, db, safe_horizon=switch, lookback_seconds=30), spark)
            run.tick()
            source = run.source
            horizon_ms = median_ms(args.runs, lambda: source.horizon(lambda: spark, model=run.model, recipient=run.recipient))
            transfer_ms = median_ms(args.runs, run.tick)
            print(f"postgres safe_horizon={switch}: horizon() {horizon_ms:.1f} ms, scheduled transfer {transfer_ms:.0f} ms")

    with maria_database() as db, tempfile.TemporaryDirectory() as tmp:
        db.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, organization_id VARCHAR(20), updated_at TIMESTAMP(6) NOT NULL)")
        config = load_config(today_config(Path(tmp), db))
        run = Runner(today_config(Path(tmp), db), spark)
        print(f"mariadb: horizon() {median_ms(args.runs, lambda: run.source.horizon(lambda: spark, model=run.model, recipient=run.recipient)):.1f} ms"
              f" (Spark JDBC; {config.source('db').vendor})")


if __name__ == "__main__":
    main()

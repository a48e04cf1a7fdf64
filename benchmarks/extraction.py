"""Extraction of one tenant from PostgreSQL: Spark JDBC (fetch size, partitions) against COPY.

Starts a Spark Connect server, generates ``--rows`` rows of one tenant (plus as many of another),
and times, median of ``--repeat``: the JDBC read staged as Parquet (what a transfer does) per fetch
size and partition count, and ``COPY (SELECT ...) TO STDOUT`` (text and binary) through psycopg.

    .venv/bin/python benchmarks/extraction.py [--rows 500000 --repeat 3]
"""

from __future__ import annotations

import argparse
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
from compare_dlt import generate  # noqa: E402
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

QUERY = "SELECT id, organization_id, status, amount, payload, updated_at FROM orders WHERE organization_id = 'big'"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--port", type=int, default=15079)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    from incsync.spark.server import start_server, stop_server

    user, db = pg_user(), f"incsync_extract_{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="incsync-extract-"))
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    server = None
    try:
        now = datetime.now(timezone.utc)
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=db, autocommit=True) as conn:
            generate(conn, tenant_rows=args.rows, c_tenants=1, c_rows=args.rows, start=now - timedelta(days=1), end=now)
        server = start_server(port=args.port, master="local[*]", log_file=work / "server.log")
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{args.port}").getOrCreate()
        url = f"jdbc:postgresql://{HOST}:{PORT}/{db}"

        def jdbc(fetch: int, parts: int) -> float:
            reader = spark.read.format("jdbc").options(url=url, user=user, driver="org.postgresql.Driver",
                                                       fetchsize=str(fetch), dbtable=f"({QUERY}) q")
            if parts > 1:
                reader = reader.options(partitionColumn="id", lowerBound="1", upperBound=str(args.rows + 1), numPartitions=str(parts))
            out = work / f"stage-{uuid.uuid4().hex[:6]}"
            started = time.monotonic()
            reader.load().write.option("outputTimestampType", "TIMESTAMP_MICROS").parquet(str(out))
            took = time.monotonic() - started
            shutil.rmtree(out)
            return took

        def copy(fmt: str) -> float:
            started = time.monotonic()
            with psycopg.connect(host=HOST, port=PORT, user=user, dbname=db) as conn, conn.cursor() as cur:
                with cur.copy(f"COPY ({QUERY}) TO STDOUT (FORMAT {fmt})") as c:
                    for _ in c:
                        pass
            return time.monotonic() - started

        jdbc(10_000, 1)  # first read on a fresh server: class loading
        cases = {f"JDBC fetchsize {f:,}, {p} partition(s) → Parquet": (lambda f=f, p=p: jdbc(f, p))
                 for f, p in ((1_000, 1), (10_000, 1), (50_000, 1), (10_000, 2), (10_000, 4))}
        cases |= {"COPY text → Python (no parse)": lambda: copy("text"), "COPY binary → Python (no parse)": lambda: copy("binary")}
        print(f"{args.rows:,} rows of one tenant; median of {args.repeat}")
        for label, fn in cases.items():
            walls = sorted(fn() for _ in range(args.repeat))
            print(f"| {label} | {statistics.median(walls):.2f} ({walls[0]:.2f}–{walls[-1]:.2f}) |", flush=True)
        spark.client.close()
    finally:
        if server is not None:
            stop_server(server)
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""How a PostgreSQL destination should fill its stage: COPY of Arrow's CSV, or COPY in PostgreSQL's binary
format encoded by pgpq, for N rows of C200's table (bigint, text, text, numeric(12,2), jsonb, timestamptz).

    .venv/bin/python benchmarks/pg_copy_format.py [--rows 1000000] [--repeat 3]

Both go through the product's ``copy_rows`` (``exact=False`` keeps the CSV path) into the publish's
temporary stage table, on the PostgreSQL server at 127.0.0.1:5432 (database postgres, nothing kept).
Prints the median wall and client CPU seconds of each, and checks both stages hold the same rows.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa

from incsync.destinations.postgres.load import STAGE, copy_rows, create_stage
from incsync.destinations.postgres.types import pg_type
from incsync.staging.batch import stage_arrow

JSONB = {b"incsync.source_vendor": b"postgres", b"incsync.source_type": b"jsonb"}
SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("status", pa.string()),
                    ("amount", pa.decimal128(12, 2)), ("payload", pa.string(), True, JSONB),
                    ("updated_at", pa.timestamp("us", tz="UTC"))])


def table(n: int) -> pa.Table:
    ids = np.arange(1, n + 1, dtype=np.int64)
    return pa.table({
        "id": ids, "organization_id": pa.array(["c_001"] * n),
        "status": pa.array(np.array(["new", "paid", "shipped"])[ids % 3]),
        "amount": pa.array([Decimal(int(i % 10000)) / 100 for i in ids], pa.decimal128(12, 2)),
        "payload": pa.array([f'{{"n": {i}, "tag": "x{i % 7}"}}' for i in ids]),
        "updated_at": pa.array(1_700_000_000_000_000 + ids * 7919, pa.timestamp("us", tz="UTC")),
    }, schema=SCHEMA)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pg-copy-") as folder:
        batch = stage_arrow(table(args.rows), Path(folder) / "stage")
        wanted = {f.name: pg_type(f) for f in batch.schema}
        seconds: dict[str, list[tuple[float, float]]] = {"csv": [], "binary": []}
        digests = {}
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres") as conn:
            for _ in range(args.repeat):
                for name in seconds:
                    create_stage(conn, wanted)
                    cpu, wall = time.process_time(), time.perf_counter()
                    copy_rows(conn, batch, wanted, into=STAGE, exact=name == "binary")
                    seconds[name].append((time.perf_counter() - wall, time.process_time() - cpu))
                    digests[name] = conn.execute(
                        "SELECT count(*), md5(string_agg(s::text, ',' ORDER BY id)) FROM pg_temp._incsync_stage s").fetchone()
                    conn.rollback()
        assert digests["csv"] == digests["binary"], digests
        print(f"{args.rows:,} rows, {digests['csv'][0]:,} in each stage, same md5")
        for name, runs in seconds.items():
            print(f"{name:>6}: wall {statistics.median(w for w, _ in runs):.2f} s, client CPU "
                  f"{statistics.median(c for _, c in runs):.2f} s (median of {len(runs)})")


if __name__ == "__main__":
    main()

"""How a MariaDB destination should fill its stage: LOAD DATA LOCAL INFILE of Arrow's CSV, or PyMySQL's
multi-row INSERT (``executemany``), for N rows of the conformance suite's typed table (issue 30).

    .venv/bin/python benchmarks/mariadb_load.py [--rows 100000] [--repeat 3]

Needs the MariaDB server on 127.0.0.1:3306 (root, no password); creates and drops its own database.
Prints the median seconds of each method, stage creation to loaded rows, and checks both stages agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from incsync.config.destinations import MariaDBDestinationConfig
from incsync.destinations.mariadb.connect import collation, connect, quote, rows, run, table
from incsync.destinations.mariadb.load import STAGE, create_stage, load_stage
from incsync.destinations.mariadb.types import json_columns, mariadb_form
from incsync.staging.batch import StagedBatch


def _batch(folder: Path, n: int) -> StagedBatch:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    table_ = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "organization_id": pa.array(["org_1"] * n),
        "status": pa.array([f"status {i % 7}" for i in range(n)]),
        "amount": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
        "paid": pa.array([i % 2 == 0 for i in range(n)]),
        "note": pa.array([None if i % 3 else f"a note, \"quoted\", {i}" for i in range(n)]),
        "updated_at": pa.array([start + timedelta(seconds=i, microseconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
    })
    file = folder / "part-00000.parquet"
    pq.write_table(table_, file)
    return StagedBatch(path=folder, files=(file,), schema=table_.schema, rows=n, bytes=file.stat().st_size)


def _insert(conn, db: str, batch: StagedBatch, form: pa.Schema, key: tuple[str, ...], binary: str) -> None:
    create_stage(conn, db, form, key=key, collation=binary, json=json_columns(batch.schema))
    columns = ", ".join(map(quote, form.names))
    statement = f"INSERT INTO {table(db, STAGE)} ({columns}) VALUES ({', '.join(['%s'] * len(form))})"
    with conn.cursor() as cur:
        for record_batch in batch.reader():
            values = [c.cast(pa.timestamp("us")) if pa.types.is_timestamp(c.type) else c for c in record_batch.columns]
            cur.executemany(statement, list(zip(*(v.to_pylist() for v in values), strict=True)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    db = f"incsync_bench_{uuid.uuid4().hex[:8]}"
    config = MariaDBDestinationConfig(name="bench", kind="mariadb", user="root", database=db)
    timings: dict[str, list[float]] = {"load_data": [], "insert": []}
    with tempfile.TemporaryDirectory() as folder, connect(config, local_files=True) as conn:
        batch = _batch(Path(folder), args.rows)
        form, key = mariadb_form(batch.schema), ("id",)
        binary = collation(conn)
        run(conn, f"CREATE DATABASE {quote(db)}")
        try:
            counts = {}
            for _ in range(args.repeat):
                for method in ("load_data", "insert"):
                    began = time.perf_counter()
                    if method == "load_data":
                        load_stage(conn, db, batch, form, key=key, collation=binary, where="bench")
                    else:
                        _insert(conn, db, batch, form, key, binary)
                    conn.commit()
                    timings[method].append(time.perf_counter() - began)
                    counts[method] = rows(conn, f"SELECT COUNT(*), SUM(CRC32(CONCAT_WS('|', {', '.join(map(quote, form.names))}))) "
                                                f"FROM {table(db, STAGE)}")[0]
            assert counts["load_data"] == counts["insert"], counts
        finally:
            run(conn, f"DROP DATABASE {quote(db)}")
    for method, seconds in timings.items():
        print(f"{method}: {statistics.median(seconds):.2f} s median of {args.repeat} ({args.rows} rows; "
              f"runs {', '.join(f'{s:.2f}' for s in seconds)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

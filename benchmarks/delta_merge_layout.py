"""Measure what a 1%-changed MERGE rewrites in a large Delta table, per layout and MERGE predicate.

Writes ``--rows`` rows (id order, like a backfill from a table read in key order), then merges 1% of
them changed, once as a contiguous key range (recent rows) and once scattered at random, with the
MERGE incsync's Delta destination runs. Prints files added/removed, rows copied and seconds from
delta-rs' merge metrics. Not part of the test suite:

    .venv/bin/python benchmarks/delta_merge_layout.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def rows(ids: list[int], *, status: str, shift: timedelta) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "organization_id": pa.array(["org_1"] * len(ids)),
        "status": pa.array([status] * len(ids)),
        "amount": pa.array([(i % 10_000) / 100 for i in ids], pa.float64()),
        "payload": pa.array([f'{{"n": {i}, "tag": "x{i % 7}"}}' for i in ids]),
        "updated_at": pa.array([T0 + shift + timedelta(seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
    })


def merge(path: Path, batch: pa.Table, *, key_range: bool) -> dict[str, int]:
    dt = DeltaTable(str(path))
    on = 't."id" = s."id"'
    if key_range:
        on += f' AND t."id" >= {min(batch["id"].to_pylist())} AND t."id" <= {max(batch["id"].to_pylist())}'
    started = time.monotonic()
    metrics = (
        dt.merge(batch, predicate=on, source_alias="s", target_alias="t", merge_schema=True)
        .when_matched_update_all(predicate='s."updated_at" >= t."updated_at"')
        .when_not_matched_insert_all()
        .execute()
    )
    metrics["seconds"] = time.monotonic() - started
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    n, changed = args.rows, args.rows // 100
    base = rows(list(range(1, n + 1)), status="new", shift=timedelta(0))
    contiguous = list(range(n - 3 * changed, n - 2 * changed))
    scattered = sorted(random.Random(7).sample(range(1, n + 1), changed))
    layouts = {"default (one write)": None, "delta.targetFileSize 4 MiB": 4 << 20, "delta.targetFileSize 1 MiB": 1 << 20}
    print(f"{n:,} rows; MERGE of {changed:,} changed rows")
    print(f"{'layout':<28}{'files':>6}{'change':>12}{'predicate':>14}{'files +/-':>12}{'rows copied':>13}{'seconds':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, size) in enumerate(layouts.items()):
            for j, (kind, ids) in enumerate((("contiguous", contiguous), ("scattered", scattered))):
                for key_range in (False, True):
                    path = Path(tmp) / f"t{i}{j}{int(key_range)}"
                    config = {"delta.targetFileSize": str(size)} if size else None
                    write_deltalake(str(path), base, mode="append", configuration=config)
                    files = len(DeltaTable(str(path)).file_uris())
                    m = merge(path, rows(ids, status="changed", shift=timedelta(days=1)), key_range=key_range)
                    print(f"{label:<28}{files:>6}{kind:>12}{'pk + range' if key_range else 'pk':>14}"
                          f"{m['num_target_files_added']:>6}/{m['num_target_files_removed']:<5}"
                          f"{m['num_target_rows_copied']:>13,}{m['seconds']:>9.2f}", flush=True)


if __name__ == "__main__":
    main()

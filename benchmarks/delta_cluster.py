"""Measure what a MERGE of changes to recently created rows reads and rewrites, with and without ``cluster_by``.

Writes ``--rows`` rows whose keys are random (scattered over the key space) and whose creation dates
follow creation order, ``--days`` of them, into a Delta table of ``--file-size`` files: once in key order
(incsync's layout without ``cluster_by``) and once ordered by (created_on, id) (``cluster_by:
[created_on]``). Then merges 1 % of the rows — the newest created, so their keys are scattered — with
the predicate incsync builds for each (the key equality and the batch's key range; plus the batch's
range of created_on with ``cluster_by``) and prints delta-rs' merge metrics. Not part of the test suite:

    .venv/bin/python benchmarks/delta_cluster.py [--rows 1000000] [--days 365] [--file-size 4194304]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def rows(ids: list[int], created: list[date], *, status: str, shift: timedelta) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "organization_id": pa.array(["org_1"] * len(ids)),
        "status": pa.array([status] * len(ids)),
        "created_on": pa.array(created, pa.date32()),
        "amount": pa.array([(i % 10_000) / 100 for i in ids], pa.float64()),
        "payload": pa.array([f'{{"n": {i}, "tag": "x{i % 7}"}}' for i in ids]),
        "updated_at": pa.array([T0 + shift] * len(ids), pa.timestamp("us", tz="UTC")),
    })


def merge(path: Path, batch: pa.Table, *, cluster: bool) -> dict[str, float]:
    dt = DeltaTable(str(path))
    ids = batch["id"].to_pylist()
    on = f't."id" = s."id" AND t."id" >= {min(ids)} AND t."id" <= {max(ids)}'
    if cluster:
        days = batch["created_on"].to_pylist()
        on += f" AND t.\"created_on\" >= '{min(days).isoformat()}' AND t.\"created_on\" <= '{max(days).isoformat()}'"
    before = {a["path"]: a["size_bytes"] for a in pa.table(dt.get_add_actions(flatten=False)).to_pylist()}
    started = time.monotonic()
    metrics = (
        dt.merge(batch, predicate=on, source_alias="s", target_alias="t")
        .when_matched_update_all(predicate='s."updated_at" > t."updated_at"')
        .when_not_matched_insert_all()
        .execute()
    )
    metrics["seconds"] = time.monotonic() - started
    after = {a["path"] for a in pa.table(DeltaTable(str(path)).get_add_actions(flatten=False)).to_pylist()}
    metrics["bytes_removed"] = sum(size for p, size in before.items() if p not in after)
    metrics["files"], metrics["bytes"] = len(before), sum(before.values())
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--file-size", type=int, default=4 << 20)
    args = parser.parse_args()
    n, changed = args.rows, args.rows // 100
    ids = random.Random(7).sample(range(1, 1_000_000_000), n)  # the k-th created key
    created = [date(2024, 1, 1) + timedelta(days=k * args.days // n) for k in range(n)]
    base = rows(ids, created, status="new", shift=timedelta(0))
    batch = rows(ids[-changed:], created[-changed:], status="changed", shift=timedelta(days=1))
    print(f"{n:,} rows over {args.days} creation dates, files of {args.file_size:,} B; "
          f"MERGE of the {changed:,} newest created rows (keys scattered)")
    print(f"{'layout and predicate':<42}{'files':>6}{'rows copied':>13}{'rewritten':>11}{'MB rewritten':>14}"
          f"{'of MB':>8}{'seconds':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, cluster in (("by key; key + key range", False), ("by (created_on, key); + created_on range", True)):
            path = Path(tmp) / label.split(";")[0].replace(" ", "_")
            order = [("created_on", "ascending"), ("id", "ascending")] if cluster else [("id", "ascending")]
            write_deltalake(str(path), base.sort_by(order), mode="append", target_file_size=args.file_size,
                            configuration={"delta.targetFileSize": str(args.file_size)})
            m = merge(path, batch, cluster=cluster)
            print(f"{label:<42}{m['files']:>6}{m['num_target_rows_copied']:>13,}{m['num_target_files_removed']:>11}"
                  f"{m['bytes_removed'] / 1e6:>14.1f}{m['bytes'] / 1e6:>8.1f}{m['seconds']:>9.2f}", flush=True)


if __name__ == "__main__":
    main()

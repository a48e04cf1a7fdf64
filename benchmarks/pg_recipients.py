"""What reading states and publishing cost with many PostgreSQL recipients on one server (issue 29).

```
.venv/bin/python benchmarks/pg_recipients.py --recipients 200 --threads 4 --rounds 3
```
One database, one schema per recipient (``r000`` ...), every recipient its own PostgreSQL destination
with the same DSN, as a fan-out run sees them. Each round calls, for every recipient, ``read_state``
(the run's state reads, ``--threads`` at a time) and then ``publish`` of a 3-row batch with its
transfer record (the fan-out's publish threads). Round 1 creates the tables; later rounds find them.
Per round it prints the wall time of each phase, the backend sessions the database saw
(``pg_stat_database.sessions``), its commits and rollbacks, and the client's round trips (each time
psycopg waits to read the server's answer) and connections it opened. Counters are
read 11 s after each phase, once every backend has flushed them (PostgreSQL 15 flushes an idle one's within 10 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from psycopg.waiting import Wait

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

DSN_ENV = "INCSYNC_BENCH_PG_DSN"
_waits = 0
_connects = 0
_waits_lock = threading.Lock()


def _count_waits() -> None:
    original = psycopg.Connection.wait
    original_connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def connect(cls, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        global _connects
        with _waits_lock:
            _connects += 1
        return original_connect(cls, *args, **kwargs)

    psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]
    psycopg.connect = psycopg.Connection.connect  # the module's alias was bound at import

    def counted(gen):  # noqa: ANN001, ANN202 - a psycopg generator: count each time it waits to read
        global _waits  # noqa: PLW0603 - a counter for this script only
        try:
            state = next(gen)
            while True:
                if state == Wait.R:
                    with _waits_lock:
                        _waits += 1
                state = gen.send((yield state))
        except StopIteration as stop:
            return stop.value

    def wait(self, gen, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - psycopg's own signature
        return original(self, counted(gen), *args, **kwargs)

    psycopg.Connection.wait = wait  # type: ignore[method-assign]


def _stats(admin: psycopg.Connection, name: str) -> tuple[int, int, int]:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute("SELECT sessions, xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s", [name]).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def _config(root: Path, n: int) -> Path:
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": "./src", "format": "parquet"}],
        "destinations": [{"name": f"d{i:03d}", "kind": "postgres", "dsn_env": DSN_ENV, "schema": f"r{i:03d}"} for i in range(n)],
        "models": [{
            "model_name": "orders", "source": "lake", "source_table": "orders", "primary_key": ["id"],
            "columns": ["id", "organization_id", "status", "updated_at"],
            "last_modified_column": "updated_at", "organization_column": "organization_id",
            "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": 1704067200,
        }],
        "recipients": [{"id": f"r{i:03d}", "id_in_provider_system": f"org_{i}", "destination": f"d{i:03d}"} for i in range(n)],
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _batch(root: Path, i: int, round_no: int):  # noqa: ANN202
    from incsync.staging.batch import StagedBatch

    folder = root / f"stage_{i:03d}_{round_no}"
    folder.mkdir()
    when = datetime(2024, 1, 1, 1, round_no, tzinfo=timezone.utc)
    table = pa.table({
        "id": pa.array([1, 2, 3], pa.int64()), "organization_id": [f"org_{i}"] * 3,
        "status": [f"s{round_no}"] * 3, "updated_at": pa.array([when] * 3, pa.timestamp("us", tz="UTC")),
    })
    pq.write_table(table, folder / "part-0.parquet")
    return StagedBatch(path=folder, files=(folder / "part-0.parquet",), schema=table.schema, rows=3,
                       bytes=(folder / "part-0.parquet").stat().st_size), when


def _record(model, recipient, round_no: int, when: datetime):  # noqa: ANN001, ANN202
    from incsync.core.bounds import to_micros
    from incsync.destinations.base import INCREMENTAL, TransferRecord

    return TransferRecord(
        transfer_id=f"t{round_no}-{recipient.id}-{uuid.uuid4().hex[:6]}", model_name=model.model_name, recipient_id=recipient.id,
        window_start="2024-01-01T00:00:00+00:00", window_end="2024-01-02T00:00:00+00:00",
        lower_bound="2024-01-01T00:00:00+00:00", upper_bound="2024-01-02T00:00:00+00:00",
        rows_transferred=3, delta_rows_transferred=3, high_watermark_micros=to_micros(when), transfer_type=INCREMENTAL,
        fingerprint="bench", lookback_seconds=0, committed_at=datetime.now(timezone.utc).isoformat(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from incsync.config.load import load_config
    from incsync.destinations.registry import build_destination

    user = pg_user()
    name = f"incsync_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(f"postgresql://{user}@{HOST}:{PORT}/postgres", autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    os.environ[DSN_ENV] = f"postgresql://{user}@{HOST}:{PORT}/{name}"
    _count_waits()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            config = load_config(_config(root, args.recipients))
            model = config.model("orders")
            pairs = [(r, build_destination(config.destination(r.destination))) for r in config.recipients]
            print(f"{args.recipients} recipients, {args.threads} threads; round, phase, wall s, sessions, commits, "
                  "rollbacks, client round trips, client connects")
            for round_no in range(1, args.rounds + 1):
                batches = {r.id: _batch(root, i, round_no) for i, (r, _) in enumerate(pairs)}
                states: dict[str, object] = {}

                def read(pair) -> None:  # noqa: ANN001
                    recipient, destination = pair
                    states[recipient.id] = destination.read_state(model=model, recipient=recipient)

                def publish(pair) -> None:  # noqa: ANN001
                    recipient, destination = pair
                    batch, when = batches[recipient.id]
                    destination.publish(model=model, recipient=recipient, batch=batch,
                                        record=_record(model, recipient, round_no, when), expected=states[recipient.id])

                for phase, work in (("read_state", read), ("publish", publish)):
                    before, waits0, connects0, t0 = _stats(admin, name), _waits, _connects, time.perf_counter()
                    with ThreadPoolExecutor(max_workers=args.threads) as pool:
                        list(pool.map(work, pairs))
                    wall = time.perf_counter() - t0
                    waits, connects = _waits - waits0, _connects - connects0
                    time.sleep(11)
                    after = _stats(admin, name)
                    print(f"{round_no}, {phase}, {wall:.2f}, {after[0] - before[0]}, {after[1] - before[1]}, "
                          f"{after[2] - before[2]}, {waits}, {connects}", flush=True)
    finally:
        _flush()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _flush() -> None:
    """Close pooled connections before the database is dropped (a no-op without a pool)."""
    try:
        from incsync.destinations.postgres.pool import close_pools
    except ImportError:
        return
    close_pools()


if __name__ == "__main__":
    main()

"""`incsync serve` at many recipients (issue 47): the server's answer times for the Delta Sharing list, metadata and
query calls, and the read throughput of a big recipient's table through the share against reading it from disk.

The world, under ``--workdir``:
- a configuration file with ``--recipients`` recipients (``r00000`` ...), each with its own Delta destination
  (``out/<id>``), one model ``orders`` shared as ``sales.orders``, and one more recipient ``big``;
- ``big``'s table written by a real incsync transfer of ``--big-rows`` rows (``run_transfer`` with the tests'
  Arrow lake source: incsync's own publish into the Delta destination, no Spark);
- every other recipient's table written with deltalake directly, in the Delta destination's layout: version 0
  the owner-stamped empty table its first publish creates (``incsync.owner``, ``delta.targetFileSize``, the
  ownership log in the commit), version 1 an append of ``--rows`` rows carrying a transfer record in its commit.
  Running 10,000 transfers would take hours on this machine; the server reads exactly what a transfer leaves;
- a token per recipient minted through the token store (``TokenStore.create``, as `incsync share create`).

Then `incsync serve -c incsync.yaml` in a process of its own (the access log to a file), and one client (a
keep-alive ``requests`` session; ``--clients`` more threads for a concurrent round) asking, for ``--sample``
recipients drawn at random, in order: list shares, list schemas, list tables (of the schema), list all tables,
table version, metadata, query. Round ``first`` is each sampled recipient's first request since the server
started (its share is built then), round ``again`` asks the same again. Reported per call and round: p50, p95,
p99 and max in milliseconds, with the 1-minute load average before and after (the machine is shared).

Throughput: ``big``'s table read ``--repeat`` times with the official client (``delta_sharing.load_as_pandas``
through the server's signed file URLs) and from disk with delta-rs (``DeltaTable(path).to_pandas()``); rows,
seconds (median, min, max), rows/s and MB/s of the table's Parquet bytes.

Not part of ``make test``:

    .venv/bin/python benchmarks/sharing_server.py --recipients 10000 --workdir /tmp/bench-sharing
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deltalake import CommitProperties, DeltaTable, write_deltalake  # noqa: E402

from incsync.destinations.ownership import OWNER_PROPERTY, OWNERSHIP_LOG_KEY, Owner  # noqa: E402
from incsync.sharing.tokens import TokenStore  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("status", pa.string()),
                    ("amount", pa.float64()), ("updated_at", pa.timestamp("us", tz="UTC"))])
DAY = datetime(2024, 1, 1, tzinfo=timezone.utc)
BIG = "big"
TARGET_FILE_SIZE = 4 << 20  # the Delta destination's default delta.targetFileSize
CALLS = ("list_shares", "list_schemas", "list_tables", "list_all_tables", "version", "metadata", "query")


def recipient_id(k: int) -> str:
    return f"r{k:05d}"


def rows_of(tenant: str, count: int, first_id: int) -> pa.Table:
    statuses = ["new", "paid", "shipped", "refunded"]
    return pa.table({
        "id": pa.array(range(first_id, first_id + count), pa.int64()),
        "organization_id": pa.array([tenant] * count),
        "status": pa.array([statuses[i % 4] for i in range(count)]),
        "amount": pa.array([round((i % 10_000) * 0.37, 2) for i in range(count)], pa.float64()),
        "updated_at": pa.array([DAY + timedelta(seconds=(i * 7) % 86_000) for i in range(count)], pa.timestamp("us", tz="UTC")),
    }, schema=SCHEMA)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(work: Path, recipients: int, port: int) -> Path:
    destinations = [{"name": f"d_{recipient_id(k)}", "kind": "delta", "path": f"./out/{recipient_id(k)}"} for k in range(recipients)]
    entries = [{"id": recipient_id(k), "id_in_provider_system": f"t{k:05d}", "destination": f"d_{recipient_id(k)}"}
               for k in range(recipients)]
    destinations.append({"name": "d_big", "kind": "delta", "path": "./out/big"})
    entries.append({"id": BIG, "id_in_provider_system": "t_big", "destination": "d_big"})
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": "./src", "format": "parquet"}],
        "destinations": destinations,
        "models": [{"model_name": "orders", "source": "lake", "source_table": "orders",
                    "columns": ["id", "organization_id", "status", "amount", "updated_at"], "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": int(DAY.timestamp())}],
        "recipients": entries,
        "sharing": {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}},
    }
    path = work / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_small_table(work: Path, k: int, rows: int) -> None:
    """One recipient's table as the Delta destination leaves it after its first transfer (see the module doc)."""
    rid, tenant = recipient_id(k), f"t{k:05d}"
    path = work / "out" / rid / "orders"
    if (path / "_delta_log").is_dir():
        return
    owner = Owner(recipient=rid, tenant=tenant, model="orders")
    log = {"owner": owner.to_json(), "previous": None, "reason": "first transfer bench", "at": DAY.isoformat()}
    DeltaTable.create(str(path), schema=SCHEMA, mode="error",
                      configuration={"delta.targetFileSize": str(TARGET_FILE_SIZE), OWNER_PROPERTY: owner.to_json()},
                      raise_if_key_not_exists=False,
                      commit_properties=CommitProperties(custom_metadata={OWNERSHIP_LOG_KEY: json.dumps(log)}))
    record = {"transfer_id": f"bench-{rid}", "transfer_type": "full_refresh", "rows": rows}
    write_deltalake(str(path), rows_of(tenant, rows, k * rows), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"incsync.transfer": json.dumps(record)}))


def _write_range(args: tuple[str, int, int, int]) -> int:
    work, start, stop, rows = args
    for k in range(start, stop):
        write_small_table(Path(work), k, rows)
    return stop - start


def build_world(work: Path, args: argparse.Namespace, port: int) -> tuple[Path, dict[str, str]]:
    started = time.perf_counter()
    config = write_config(work, args.recipients, port)
    print(f"config: {args.recipients + 1:,} recipients, {config.stat().st_size / 1e6:.1f} MB", flush=True)

    src = work / "src" / "orders"
    src.mkdir(parents=True, exist_ok=True)
    big_table = work / "out" / BIG / "orders"
    if not (big_table / "_delta_log").is_dir():
        pq.write_table(rows_of("t_big", args.big_rows, 10**9), src / "part-0.parquet")
        os.environ.setdefault("INCSYNC_STAGING_DIR", str(work / "staging"))
        from incsync_tests.support import arrow_transfer  # the real transfer, Arrow-read (no Spark)

        t0 = time.perf_counter()
        outcome = arrow_transfer.run(config, "2024-01-01", scheduled=False, recipient_id=BIG, staging_root=work / "staging")
        print(f"big: {args.big_rows:,} rows by a real transfer in {time.perf_counter() - t0:.1f} s "
              f"({outcome.record.transfer_id})", flush=True)

    t0 = time.perf_counter()
    from multiprocessing import get_context

    step = 250
    chunks = [(str(work), s, min(s + step, args.recipients), args.rows) for s in range(0, args.recipients, step)]
    with get_context("spawn").Pool(args.writers) as pool:  # fork would inherit delta-rs's runtime threads and hang
        done = 0
        for n in pool.imap_unordered(_write_range, chunks):
            done += n
            if done % 2000 < step:
                print(f"  tables: {done:,}/{args.recipients:,} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"small tables: {args.recipients:,} x {args.rows} rows in {time.perf_counter() - t0:.1f} s", flush=True)

    tokens_file = work / "tokens.json"  # the benchmark's own copy: a real provider never keeps them
    if tokens_file.exists():
        tokens = json.loads(tokens_file.read_text())
    else:
        t0 = time.perf_counter()
        store = TokenStore(work / ".incsync-sharing.sqlite")
        tokens = {rid: store.create(rid, lifetime_seconds=86_400 * 30).token
                  for rid in [recipient_id(k) for k in range(args.recipients)] + [BIG]}
        tokens_file.write_text(json.dumps(tokens))
        os.chmod(tokens_file, 0o600)
        print(f"tokens: {len(tokens):,} minted in {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"world ready in {time.perf_counter() - started:.0f} s", flush=True)
    return config, tokens


class Server:
    """`incsync serve` in its own process."""

    def __init__(self, config: Path, port: int, log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.log = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "incsync.cli.main", "serve", "-c", str(config)],
                                     cwd=config.parent, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}/delta-sharing"

    def wait(self, token: str, timeout: float = 300) -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"incsync serve exited with {self.proc.returncode}; see its log")
            try:
                if requests.get(self.base + "/shares", headers={"Authorization": f"Bearer {token}"}, timeout=5).ok:
                    return time.perf_counter() - t0
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise SystemExit("incsync serve did not answer in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def call(session: requests.Session, base: str, token: str, share: str, what: str) -> float:
    table = f"{base}/shares/{share}/schemas/sales/tables/orders"
    urls = {"list_shares": f"{base}/shares", "list_schemas": f"{base}/shares/{share}/schemas",
            "list_tables": f"{base}/shares/{share}/schemas/sales/tables", "list_all_tables": f"{base}/shares/{share}/all-tables",
            "version": f"{table}/version", "metadata": f"{table}/metadata", "query": f"{table}/query"}
    headers = {"Authorization": f"Bearer {token}"}
    t0 = time.perf_counter()
    if what == "query":
        answer = session.post(urls[what], headers=headers, json={}, timeout=60)
    else:
        answer = session.get(urls[what], headers=headers, timeout=60)
    elapsed = (time.perf_counter() - t0) * 1000
    if answer.status_code != 200:
        raise SystemExit(f"{what} for {share}: {answer.status_code} {answer.text[:200]}")
    if what == "query" and '"file"' not in answer.text:
        raise SystemExit(f"query for {share} answered no file")
    return elapsed


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"n": len(values), "p50": round(statistics.median(ordered), 1), "p95": at(0.95), "p99": at(0.99),
            "max": round(ordered[-1], 1)}


def latency_round(base: str, tokens: dict[str, str], sample: list[str], clients: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {c: [] for c in CALLS}
    lock = threading.Lock()
    local = threading.local()

    def one(rid: str) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        for what in CALLS:
            ms = call(local.session, base, tokens[rid], rid, what)
            with lock:
                times[what].append(ms)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, sample))
    return {c: percentiles(v) for c, v in times.items()}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def throughput(work: Path, base: str, token: str, repeat: int) -> dict[str, Any]:
    import delta_sharing

    profile = work / "big.share"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": base, "bearerToken": token}))
    os.chmod(profile, 0o600)
    path = str(work / "out" / BIG / "orders")
    dt = DeltaTable(path)
    size = sum(a["size_bytes"] for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist())
    out: dict[str, Any] = {"table_bytes": size, "files": len(dt.file_uris())}
    for name, read in (("share", lambda: delta_sharing.load_as_pandas(f"{profile}#{BIG}.sales.orders")),
                       ("disk", lambda: DeltaTable(path).to_pandas())):
        seconds, rows, loads = [], 0, []
        for _ in range(repeat):
            loads.append(load())
            t0 = time.perf_counter()
            frame = read()
            seconds.append(time.perf_counter() - t0)
            rows = len(frame)
            del frame
        median = statistics.median(seconds)
        out[name] = {"rows": rows, "seconds_median": round(median, 3), "seconds_min": round(min(seconds), 3),
                     "seconds_max": round(max(seconds), 3), "rows_per_second": round(rows / median),
                     "mb_per_second": round(size / median / 1e6, 1), "load_1m": loads}
    out["share_over_disk"] = round(out["share"]["seconds_median"] / out["disk"]["seconds_median"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=20, help="rows in each small recipient's table")
    parser.add_argument("--big-rows", type=int, default=500_000)
    parser.add_argument("--sample", type=int, default=1000, help="recipients asked in each latency round")
    parser.add_argument("--clients", type=int, default=4, help="threads of the concurrent round")
    parser.add_argument("--repeat", type=int, default=3, help="reads of the big table each way")
    parser.add_argument("--writers", type=int, default=2, help="processes writing the small tables")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-sharing"))
    parser.add_argument("--seed", type=int, default=47)
    args = parser.parse_args()

    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config, tokens = build_world(work, args, port)
    if str(port) not in config.read_text():  # a world kept from an earlier run: listen on a free port again
        write_config(work, args.recipients, port)

    result: dict[str, Any] = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "recipients": args.recipients + 1, "rows": args.rows, "big_rows": args.big_rows,
                              "sample": args.sample, "clients": args.clients}
    server = Server(config, port, work / "serve.log")
    try:
        result["server_start_seconds"] = round(server.wait(tokens[BIG]), 1)
        print(f"server answering after {result['server_start_seconds']} s", flush=True)
        sample = random.Random(args.seed).sample([recipient_id(k) for k in range(args.recipients)], args.sample)
        rounds: dict[str, Any] = {}
        for name, clients, who in (("first", 1, sample), ("again", 1, sample),
                                   (f"again, {args.clients} clients", args.clients, sample)):
            before = load()
            t0 = time.perf_counter()
            figures = latency_round(server.base, tokens, who, clients)
            rounds[name] = {"calls": figures, "load_1m_before": before, "load_1m_after": load(),
                            "seconds": round(time.perf_counter() - t0, 1)}
            print(f"round {name} ({rounds[name]['seconds']} s, load {before} -> {rounds[name]['load_1m_after']}):", flush=True)
            for what, f in figures.items():
                print(f"  {what:16} p50 {f['p50']:7.1f}  p95 {f['p95']:7.1f}  p99 {f['p99']:7.1f}  max {f['max']:7.1f} ms", flush=True)
        result["rounds"] = rounds
        result["throughput"] = throughput(work, server.base, tokens[BIG], args.repeat)
        t = result["throughput"]
        for way in ("share", "disk"):
            print(f"{way:5}: {t[way]['rows']:,} rows, median {t[way]['seconds_median']} s, {t[way]['rows_per_second']:,} rows/s, "
                  f"{t[way]['mb_per_second']} MB/s (load {t[way]['load_1m']})", flush=True)
        print(f"share / disk: {t['share_over_disk']}x ({t['files']} files, {t['table_bytes'] / 1e6:.1f} MB)", flush=True)
    finally:
        server.stop()
    out = work / f"result-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"result: {out}", flush=True)


if __name__ == "__main__":
    main()

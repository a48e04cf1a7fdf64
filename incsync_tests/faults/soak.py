"""The SIGKILL soak (``make test-faults``): transfers killed at random moments, a reader polling throughout.

``python -m incsync_tests.faults.soak [--kills 200] [--report FILE]``

For each destination kind (Delta, PostgreSQL, object storage) a worker changes its own lake source in
*generations* (each inserts or rewrites a group of rows with one last-modified value, for two tenants),
starts ``incsync_tests.support.arrow_transfer`` for a random window (scheduled or not) and SIGKILLs it after a
random delay, until the kills add up to ``--kills``; runs it does not kill must succeed. A reader per
destination polls the transfer state, then the rows, and counts:

- duplicate keys: a primary key held twice (Delta, PostgreSQL), or one key and last-modified with two
  different contents (object storage, whose appends repeat re-read rows by design);
- partial states: a generation's group seen part old, part new, or part present, part absent;
- HW ahead of data: a high watermark above every last-modified value a reader can see;
- cross-tenant rows: a row of the other tenant in the recipient's destination.

At the end every window runs once more, unkilled, and rows lost counts the source's rows (latest
version per key) the destination does not hold exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest

from incsync_tests.support.destinations import KINDS as EVERY_KIND
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_spec, postgres_database
from incsync_tests.support.lake import lake_config, order, ts, write_table

REPO = Path(__file__).resolve().parents[2]
GROUP = 6  # rows a generation writes, all with one last-modified value
STEP = timedelta(minutes=10)  # between generations' last-modified values: 144 a day, so runs span windows
COUNTERS = ("rows_lost", "duplicate_keys", "partial_states", "hw_ahead_of_data", "cross_tenant_rows")


class Source:
    """The lake table one worker changes, and what each group of keys should look like."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.rows: dict[int, dict] = {}
        self.groups: list[list[int]] = []  # the keys of each group (one per inserting generation)
        self.generation = 0
        self.next_id = 1

    def step(self, rng: random.Random) -> None:
        self.generation += 1
        lm = ts(1) + STEP * self.generation
        status = f"g{self.generation}"
        if self.groups and rng.random() < 0.4:  # rewrite a whole earlier group, tenant by tenant
            for key in rng.choice(self.groups):
                self.rows[key] = {**self.rows[key], "status": status, "updated_at": lm}
        else:
            keys = []
            for i in range(GROUP):
                org = "org_1" if i % 2 == 0 else "org_2"
                self.rows[self.next_id] = order(self.next_id, org, lm, status=status, amount=float(self.generation))
                keys.append(self.next_id)
                self.next_id += 1
            self.groups.append(keys)
        write_table(self.folder, "orders", sorted(self.rows.values(), key=lambda r: r["id"]))

    def windows(self) -> list[str]:
        last = ts(1) + STEP * self.generation
        return [f"2024-01-{d:02d}" for d in range(1, last.day + 1)]

    def org1(self) -> dict[int, dict]:
        return {k: r for k, r in self.rows.items() if r["organization_id"] == "org_1"}


class Reader(threading.Thread):
    """Polls one destination: the transfer state first, then the rows (so a commit in between only adds rows)."""

    def __init__(self, target: Target, source: Source, counts: Counter, lock: threading.Lock):
        super().__init__(daemon=True)
        self.target, self.source, self.counts, self.lock = target, source, counts, lock
        self.stop = threading.Event()
        self.polls = self.errors = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                groups = [list(g) for g in self.source.groups]
                hw = self.target.high_watermark()
                raw = self.target.raw_rows()
            except Exception:  # noqa: BLE001 - a destination not created yet, a file removed under the reader
                self.errors += 1
                time.sleep(0.2)
                continue
            found = check_snapshot(self.target.kind, raw, hw, groups)
            with self.lock:
                self.counts.update(found)
                self.counts["reader_polls"] += 1
            self.polls += 1
            time.sleep(0.25)


# DuckDB locks its file for one process while a connection is open: a reader polling the file beside the
# writers makes their publishes wait for it and its own opens fail while they publish, which is DuckDB's
# model and not a fault to count.
KINDS = tuple(k for k in EVERY_KIND if k != "duckdb")


def check_snapshot(kind: str, raw: list[dict], hw, groups: list[list[int]]) -> Counter:
    """The four per-snapshot counters of one reader poll."""
    found: Counter = Counter()
    found["cross_tenant_rows"] = sum(1 for r in raw if r["organization_id"] != "org_1")
    if kind == "object_storage":
        contents: dict[tuple, set] = {}
        for r in raw:
            contents.setdefault((r["id"], r["updated_at"]), set()).add((r["status"], r["amount"]))
        found["duplicate_keys"] = sum(1 for v in contents.values() if len(v) > 1)
        latest: dict[int, dict] = {}
        for r in raw:
            if r["id"] not in latest or r["updated_at"] > latest[r["id"]]["updated_at"]:
                latest[r["id"]] = r
    else:
        ids = Counter(r["id"] for r in raw)
        found["duplicate_keys"] = sum(n - 1 for n in ids.values() if n > 1)
        latest = {r["id"]: r for r in raw}
    if hw is not None and (not latest or max(r["updated_at"] for r in latest.values()) < hw):
        found["hw_ahead_of_data"] = 1
    for keys in groups:
        seen = [latest.get(k) for k in keys[0::2]]  # the group's org_1 keys (it alternates org_1, org_2)
        present = [r for r in seen if r is not None]
        if present and (len(present) != len(seen) or len({(r["status"], r["updated_at"]) for r in present}) > 1):
            found["partial_states"] += 1
    return found


class Worker(threading.Thread):
    """Changes the source, runs transfers, kills some of them; one destination kind."""

    def __init__(self, kind: str, root: Path, kills: int, seed: int, counts: Counter, lock: threading.Lock):
        super().__init__(daemon=True)
        self.kind, self.root, self.kills_wanted, self.counts, self.lock = kind, root, kills, counts, lock
        self.rng = random.Random(seed)
        self.source = Source(root / "src")
        self.kills = self.completed = self.failed = 0
        self.durations: list[float] = []
        self.failures: list[str] = []
        self.staging = root / "staging"
        root.mkdir(parents=True, exist_ok=True)
        self.config = lake_config(
            root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
            destinations=[destination_spec(kind)],
        )

    def _transfer(self, window: str, scheduled: bool, *, kill_after: float | None) -> tuple[bool, float]:
        """Run one transfer; True when it was killed."""
        env = {**os.environ, "INCSYNC_STAGING_DIR": str(self.staging)}
        args = [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(self.config), window, *(["--scheduled"] if scheduled else [])]
        started = time.monotonic()
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            return True, time.monotonic() - started
        took = time.monotonic() - started
        if proc.returncode != 0:
            self.failed += 1
            self.failures.append(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
        return False, took

    def run(self) -> None:
        self.source.step(self.rng)
        self._transfer("2024-01-01", False, kill_after=None)
        while self.kills < self.kills_wanted:
            if self.rng.random() < 0.5:
                self.source.step(self.rng)
            windows = self.source.windows()
            window = windows[-1] if self.rng.random() < 0.7 else self.rng.choice(windows)
            typical = sorted(self.durations)[len(self.durations) // 2] if self.durations else 3.0
            # Most of a run's first half is imports: kill in its second half, or let it finish (1 in 4).
            kill_after = self.rng.uniform(0.5, 1.1) * typical if self.rng.random() < 0.75 else None
            killed, took = self._transfer(window, self.rng.random() < 0.6, kill_after=kill_after)
            if killed:
                self.kills += 1
                if self.kills % 10 == 0:
                    print(f"{self.kind}: {self.kills}/{self.kills_wanted} kills, {self.completed} runs finished", file=sys.stderr, flush=True)
            else:
                self.completed += 1
                self.durations.append(took)

    def finish(self) -> int:
        """Run every window once, unkilled; the source rows of org_1 the destination does not hold exactly."""
        for window in self.source.windows():
            self._transfer(window, False, kill_after=None)
        rows = Target(self.config).rows()
        held = {r["id"]: (r["status"], r["updated_at"]) for r in rows}
        want = {k: (r["status"], r["updated_at"]) for k, r in self.source.org1().items()}
        return sum(1 for k, v in want.items() if held.get(k) != v)


def soak(kills: int, seed: int) -> dict:
    counts: Counter = Counter()
    lock = threading.Lock()
    started = time.monotonic()
    per_kind = {k: kills // len(KINDS) + (1 if i < kills % len(KINDS) else 0) for i, k in enumerate(KINDS)}
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="incsync-soak-")))
        dsn = stack.enter_context(postgres_database())
        os.environ[PG_DSN_ENV] = dsn
        workers = [Worker(k, root / k, per_kind[k], seed + i, counts, lock) for i, k in enumerate(KINDS)]
        readers = [Reader(Target(w.config), w.source, counts, lock) for w in workers]
        for thread in [*workers, *readers]:
            thread.start()
        for w in workers:
            w.join()
        for r in readers:
            r.stop.set()
            r.join(timeout=10)
        lost = {w.kind: w.finish() for w in workers}
        leftover = {w.kind: sorted(p.name for p in w.staging.iterdir()) if w.staging.exists() else [] for w in workers}
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kills": sum(w.kills for w in workers),
        "kills_by_destination": {w.kind: w.kills for w in workers},
        "completed_runs": sum(w.completed for w in workers),
        "failed_runs": sum(w.failed for w in workers),
        "failures": sorted({f for w in workers for f in w.failures})[:10],
        "generations": {w.kind: w.source.generation for w in workers},
        "reader_polls": counts["reader_polls"],
        "reader_errors": sum(r.errors for r in readers),
        "rows_lost": sum(lost.values()),
        "duplicate_keys": counts["duplicate_keys"],
        "partial_states": counts["partial_states"],
        "hw_ahead_of_data": counts["hw_ahead_of_data"],
        "cross_tenant_rows": counts["cross_tenant_rows"],
        "staging_left_after_final_pass": sum(len(v) for v in leftover.values()),
        "duration_seconds": round(time.monotonic() - started),
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--report", help="also write the report here (JSON)")
    args = parser.parse_args(argv)
    try:
        report = soak(args.kills, args.seed)
    except pytest.skip.Exception as exc:
        print(f"soak needs PostgreSQL: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text + "\n")
    return 0 if all(report[c] == 0 for c in COUNTERS) and report["failed_runs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

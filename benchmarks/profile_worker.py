"""Where workload A's time goes on the documented path: the README's worker (``incsync worker -c
incsync.yaml``, local Spark inside it) over a config holding every recipient of the data, profiled by
py-spy and by Spark's own event log, beside the floor (``floor.py``) on the same data.

The data, the config and the worker are ``compare_dlt.py``'s (its ``generate``, ``Bench.incsync_config`` and
``Bench.start_worker``). Per destination and repetition: a fresh worker (its Spark writing an event log
through ``SPARK_CONF_DIR``, the config untouched), ``py-spy record --idle --nonblocking`` attached to it, the
README's client backfilling tenant ``big`` (timed), py-spy stopped; then the floor. It prints, medians over
the repetitions:
- the phases of the worker's main thread (the thread that serves the request and runs the Dagster run in
  process), from py-spy's samples classified by the frames on the stack (``PHASES``);
- Dagster's own timeline of the run (its event log: run start, step start, output handled, run end);
- Spark's jobs (the event log: each job's duration and description) and their summed task metrics;
- the functions holding most samples, inclusive and on top of the stack.

    .venv/bin/python benchmarks/profile_worker.py [--tenant-rows 500000 --c-tenants 200 --c-rows 5000000
        --destinations delta,postgres --repeat 3 --rate 100 --max-load 1.5 --max-wait 900 --out DIR]

On a shared machine ``--max-load`` waits (``--max-wait`` seconds at most) before each run for the 1-minute
load average to fall below it; each run records the load it started at.
    .venv/bin/python benchmarks/profile_worker.py --analyze DIR     # the tables again from a kept DIR

Needs py-spy (``pip install py-spy``) and root or ptrace rights over the worker.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dlt import BIG, BIN, Bench, generate, measure, settle, stop  # noqa: E402 - sibling script
from instances import Instances  # noqa: E402
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

from incsync.worker.client import WORKER_ENV_VAR  # noqa: E402

# A sample's phase: the deepest frame on the main thread's stack that one of these names (function, or "*"
# for any function of the file, and a piece of its file's path); among rules matching one frame, the first.
PHASES: list[tuple[str, str, str]] = [
    ("idle: waiting for a request", "serve", "incsync/worker/server.py"),
    ("worker: request in, answer out", "handle", "incsync/worker/server.py"),
    ("CLI: config, recipients, windows", "run_transfer", "incsync/cli/transfer.py"),
    ("CLI: definitions, instance, reap, register, run specs", "_launch", "incsync/cli/transfer.py"),
    ("Dagster: run create/start/end, step, resources (no deeper rule)", "run_in_process", "incsync/orchestration/runs.py"),
    ("planning: mark running, Spark session", "_transfer", "incsync/orchestration/assets.py"),
    ("planning: mark running, Spark session", "_open_reads", "incsync/orchestration/assets.py"),
    ("planning: transfer slots", "run_holding", "incsync/orchestration/slots.py"),
    ("planning: bounds, plan (no deeper rule)", "plan_reads", "incsync/transfer/reads.py"),
    ("planning: open the Spark JDBC read", "open_read", "incsync/transfer/reads.py"),
    ("planning: Spark JDBC schema probe (a JDBC query from the JVM)", "_probe_schema", "incsync/sources/jdbc/"),
    ("planning: Spark JDBC schema probe (a JDBC query from the JVM)", "probe_schema", "incsync/sources/jdbc/"),
    ("planning: the relation's description (psycopg; Spark's schema kept while it holds)", "result_shape", "incsync/sources/jdbc/shape.py"),
    ("planning: source horizon (psycopg)", "horizon", "incsync/sources/jdbc/source.py"),
    ("planning: source row count (psycopg)", "count_rows", "incsync/sources/jdbc/source.py"),
    ("destination state reads (planning; between commits)", "read_state", "incsync/destinations/"),
    ("IO manager: run lookup (no deeper rule)", "handle_output", "incsync/orchestration/io_manager.py"),
    ("staging: folders", "_assign_staging", "incsync/transfer/execute.py"),
    ("staging: Spark query analysis (the read's schema)", "column_plans", "incsync/staging/"),
    ("staging: Spark query analysis (the read's schema)", "spark_parquet_schema", "incsync/staging/"),
    ("staging: JDBC read -> Arrow in Python (collect, small batch)", "_collect", "incsync/staging/spark.py"),
    ("staging: Arrow -> Parquet in Python", "stage_arrow", "incsync/staging/"),
    ("staging: JDBC read -> Parquet (one Spark write job)", "_write", "incsync/staging/spark.py"),
    ("staging: staged files' schema and count", "_faithful_files", "incsync/staging/spark.py"),
    ("staging: staged files' schema and count", "count_rows", "pyarrow/"),
    ("validation: windows, infinities, keys, counts", "count_windows", "incsync/transfer/"),
    ("validation: windows, infinities, keys, counts", "refuse_infinities", "incsync/staging/"),
    ("validation: windows, infinities, keys, counts", "keys_unique", "incsync/transfer/"),
    ("validation: windows, infinities, keys, counts", "validate_and_count", "incsync/transfer/"),
    ("publish: split into commits", "slice_batch", "incsync/staging/"),
    ("publish: destination write + commit", "publish_with_retries", "incsync/transfer/publish.py"),
    ("reporting: metadata, materializations handed over", "on_commit", "incsync/orchestration/io_manager.py"),
    ("reporting: metadata, materializations handed over", "*", "incsync/orchestration/reporting.py"),
    ("reporting: metadata, materializations handed over", "*", "incsync/orchestration/metadata.py"),
    ("staging cleanup", "remove", "incsync/staging/folders.py"),
    ("CLI: results, lines", "failure_message", "incsync/orchestration/runs.py"),
    ("after the answer: release memory (gc, malloc_trim)", "release_memory", "incsync/worker/server.py"),
    # Across phases: deeper than any of the above, so they win wherever they occur.
    ("Dagster event log writes (any phase)", "store_event", "dagster/"),
    ("Dagster event log writes (any phase)", "store_event_batch", ""),
    ("Dagster event log writes (any phase)", "*", "incsync/orchestration/dagster_compat/sqlite.py"),
    ("Dagster compute-log capture (tail processes)", "*", "dagster/_core/execution/compute_logs.py"),
    ("Python imports on first use (any phase)", "_find_and_load", "importlib"),
]
IDLE = PHASES[0][0]
WAITS = ("wait", "_wait_for_tstate_lock", "select", "poll", "accept", "readinto", "sleep", "acquire", "recv")
# Threads that block inside a C call whose caller is then the top Python frame: py4j's finalizer (a queue)
# and the run's heartbeat (an event).
BLOCKED_IN_C = ("FinalizerWorker.run", "_beat")


def phase_of(stack: list[dict[str, str]]) -> str:
    """``stack``: outermost frame first; py-spy names a method ``Class.method``."""
    found = "other (outside incsync's request)"
    for frame in stack:
        name, file = frame["name"].rsplit(".", 1)[-1], frame.get("file", "")
        for phase, function, part in PHASES:
            if function in (name, "*") and part in file:
                found = phase
                break
    return found


def short(frame: dict[str, str]) -> str:
    file = frame.get("file", "")
    for root in ("site-packages/", "/work/", "python3.11/"):
        if root in file:
            file = file.split(root, 1)[1]
            break
    return f"{frame['name']} ({file}:{frame.get('line', '?')})"


def main_profile(speedscope: Path) -> tuple[str, list[list[dict[str, str]]]]:
    """The thread that served the request (the one with ``handle`` frames): its samples as stacks."""
    doc = json.loads(speedscope.read_text())
    frames = doc["shared"]["frames"]
    for profile in doc["profiles"]:
        stacks = [[frames[i] for i in sample] for sample in profile["samples"]]
        if any(f["name"].endswith("handle") and "worker/server.py" in f.get("file", "") for s in stacks for f in s):
            return profile["name"], stacks
    raise SystemExit(f"{speedscope}: no thread ran the worker's request handler")


# Work on other threads, told by a frame on their stack (py-spy names a profile after the first thread that
# had its id, and the OS reuses ids: the run reporter often inherits the Spark warm-up thread's).
THREAD_WORK = (("RunReporter", "run reporter: storing materializations and planned windows"),
               ("batch_reader", "publish feed: staged Parquet read into Arrow batches"),
               ("SparkWarmUp", "Spark warm-up (session lookup)"))


def other_threads(speedscope: Path, main: str, interval: float) -> dict[str, float]:
    """Seconds of work on the other threads (a sample whose top frame is none of ``WAITS``), by ``THREAD_WORK``."""
    doc = json.loads(speedscope.read_text())
    frames = doc["shared"]["frames"]
    busy: Counter[str] = Counter()
    for profile in doc["profiles"]:
        if profile["name"] == main:
            continue
        for sample in profile["samples"]:
            top = frames[sample[-1]]["name"] if sample else ""
            if not sample or top.rsplit(".", 1)[-1].lstrip("_").startswith(WAITS) or top.endswith(BLOCKED_IN_C):
                continue
            names = [frames[i]["name"] for i in sample]
            label = next((work for marker, work in THREAD_WORK if any(marker in n for n in names)), None)
            busy[label or (profile["name"].split('"')[1] if '"' in profile["name"] else profile["name"]) or "(unnamed)"] += interval
    return dict(busy)


def dagster_timeline(home: Path, started: float, env: dict[str, str]) -> dict[str, float]:
    """Seconds after the client started of the run's lifecycle events, from the instance's event log."""
    import dagster as dg

    os.environ.update({**env, "DAGSTER_HOME": str(home)})
    marks: dict[str, float] = {}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_runs(limit=1)[0]
        for record in instance.all_logs(run.run_id):
            event = record.dagster_event
            if event is None:
                continue
            name = event.event_type_value
            if name in ("ASSET_MATERIALIZATION", "ASSET_MATERIALIZATION_PLANNED"):
                marks.setdefault(f"first {name}", record.timestamp - started)
                marks[f"last {name}"] = record.timestamp - started
            else:
                marks.setdefault(name, record.timestamp - started)
        stats = instance.get_run_stats(run.run_id)
        marks["run created (launch_time/start)"] = (stats.launch_time or stats.start_time or started) - started
    return marks


def spark_jobs(events_dir: Path, started: float) -> tuple[list[dict[str, object]], dict[str, float]]:
    """Spark's jobs during the transfer (start after the client's start), and their stages' summed task metrics."""
    files = [f for f in events_dir.rglob("*") if f.is_file() and not f.name.startswith(".")]
    jobs: dict[int, dict[str, object]] = {}
    sql_desc: dict[int, str] = {}
    metrics: Counter[str] = Counter()
    for line in files[0].read_text().splitlines() if files else []:
        event = json.loads(line)
        kind = event["Event"]
        if kind.endswith("SQLExecutionStart"):
            sql_desc[event["executionId"]] = event.get("description", "")
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties", {})
            execution = props.get("spark.sql.execution.id")
            jobs[event["Job ID"]] = {
                "start": event["Submission Time"] / 1000 - started,
                "what": props.get("spark.job.description") or sql_desc.get(int(execution) if execution else -1, "")
                or props.get("callSite.short", ""),
                "stages": len(event.get("Stage Infos", [])),
            }
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            job = jobs[event["Job ID"]]
            job["seconds"] = event["Completion Time"] / 1000 - started - job["start"]
        elif kind == "SparkListenerTaskEnd":
            task = event.get("Task Metrics") or {}
            info = event.get("Task Info", {})
            if info.get("Launch Time", 0) / 1000 < started:
                continue
            for key in ("Executor Run Time", "Executor CPU Time", "JVM GC Time", "Executor Deserialize Time",
                        "Result Serialization Time"):
                value = task.get(key, 0)
                metrics[key] += value / 1e9 if key == "Executor CPU Time" else value / 1000
            metrics["tasks"] += 1
            metrics["output rows"] += (task.get("Output Metrics") or {}).get("Records Written", 0)
    return [j for j in jobs.values() if j["start"] >= -0.5], dict(metrics)


def analyze(out: Path) -> None:
    runs = json.loads((out / "runs.json").read_text())
    by_dest: dict[str, list[dict[str, object]]] = defaultdict(list)
    for run in runs:
        by_dest[run["destination"]].append(run)
    print(f"\n{out}: {runs[0]['machine']}")
    for destination, reps in by_dest.items():
        walls = [r["wall"] for r in reps]
        floors = [r["floor"] for r in reps if r.get("floor") is not None]
        print(f"\n### A → {destination}: worker {statistics.median(walls):.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)})"
              + (f"; floor {statistics.median(floors):.2f} s ({', '.join(f'{w:.2f}' for w in floors)})" if floors else "")
              + f"; load averages at the runs: {', '.join('/'.join(f'{x:.1f}' for x in r['load']) for r in reps)}")
        phases: dict[str, list[float]] = defaultdict(list)
        inclusive: Counter[str] = Counter()
        leaf: Counter[str] = Counter()
        samples_total = 0
        threads: dict[str, list[float]] = defaultdict(list)
        per_rep: list[dict[str, float]] = []
        for r in reps:
            rep_dir = out / r["folder"]
            main_name, stacks = main_profile(rep_dir / "worker.speedscope.json")
            interval = r["profiled_seconds"] / max(1, len(stacks))
            for name, seconds in other_threads(rep_dir / "worker.speedscope.json", main_name, interval).items():
                threads[name].append(seconds)
            counts = Counter(phase_of(s) for s in stacks)
            per_rep.append({p: n * interval for p, n in counts.items() if p != IDLE})
            for s in stacks:
                if phase_of(s) == IDLE:
                    continue
                samples_total += 1
                for name in {short(f) for f in s}:
                    inclusive[name] += 1
                if s:
                    leaf[short(s[-1])] += 1
        for phase in {p for busy in per_rep for p in busy}:
            phases[phase] = [busy.get(phase, 0.0) for busy in per_rep]
        print("\n| phase (worker's main thread, py-spy) | median s | runs |\n|---|---|---|")
        for phase, values in sorted(phases.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"| {phase} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
        after = "after the answer: release memory (gc, malloc_trim)"
        sums = [sum(v[i] for k, v in phases.items() if k != after) for i in range(len(reps))]
        print(f"| **sum before the answer** | {statistics.median(sums):.2f} | {', '.join(f'{v:.2f}' for v in sums)} |")
        print("\nOther threads, seconds off a wait (median): " + ", ".join(
            f"{k} {statistics.median(v + [0.0] * (len(reps) - len(v))):.2f}" for k, v in sorted(threads.items())))
        marks: dict[str, list[float]] = defaultdict(list)
        for r in reps:
            for k, v in r["dagster"].items():
                marks[k].append(v)
        print("\n| Dagster event (s after the client started) | median |\n|---|---|")
        for k, v in sorted(marks.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"| {k} | {statistics.median(v):.2f} |")
        print("\n| Spark job (rep 1) | starts at s | seconds |\n|---|---|---|")
        for job in reps[0]["spark_jobs"]:
            print(f"| {str(job['what'])[:90]} | {job['start']:.2f} | {job.get('seconds', float('nan')):.2f} |")
        totals: dict[str, list[float]] = defaultdict(list)
        for r in reps:
            for k, v in r["spark_metrics"].items():
                totals[k].append(v)
        print("Spark task metrics, median of the runs: " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in totals.items()))
        phases_mb: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in reps:
            for k, v in memory_by_phase(r).items():
                phases_mb[k].append(v)
        if phases_mb:
            print("\n| stretch of the request | worker's Python peak MB (median) | its JVM's peak MB (median) |\n|---|---|---|")
            for k, v in phases_mb.items():
                print(f"| {k} | {statistics.median(x[0] for x in v):,.0f} | {statistics.median(x[1] for x in v):,.0f} |")
        print(f"\nTop frames, {destination} ({samples_total} samples of the request over {len(reps)} runs):")
        print("| inclusive % | function |\n|---|---|")
        for name, n in inclusive.most_common(40):
            if any(skip in name for skip in ("<module>", "_run_module_as_main", "_run_code", "main (incsync/cli/main.py")):
                continue
            print(f"| {100 * n / samples_total:.0f} | {name} |")
        print("\n| on top % | function |\n|---|---|")
        for name, n in leaf.most_common(15):
            print(f"| {100 * n / samples_total:.0f} | {name} |")


def rss_kb(pid: int | None) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, TypeError):
        return 0


class RssSampler:
    """The worker's and its JVM's resident memory every 50 ms during the request: (s after the client's start,
    Python MB, JVM MB)."""

    def __init__(self, pid: int, jvm: int | None, started: float) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.done = threading.Event()

        def run() -> None:
            while not self.done.is_set():
                self.samples.append((time.time() - started, rss_kb(pid) / 1024, rss_kb(jvm) / 1024))
                self.done.wait(0.05)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self) -> list[tuple[float, float, float]]:
        self.done.set()
        self.thread.join()
        return self.samples


def memory_by_phase(run: dict[str, object]) -> dict[str, tuple[float, float]]:
    """Peak Python and JVM MB in each stretch of the request, cut by Spark's staging job (the run's longest)
    and Dagster's materializations: before it (launch, planning), the job, after it to the last commit, the
    rest (reporting, run end, release_memory)."""
    samples = run.get("rss") or []
    jobs = [j for j in run.get("spark_jobs", []) if "seconds" in j]
    if not samples:
        return {}
    job = max(jobs, key=lambda j: j["seconds"]) if jobs else None
    cuts = [("before any work (resident)", float("-inf"), 0.0)]
    if job:
        last = run.get("dagster", {}).get("last ASSET_MATERIALIZATION", job["start"] + job["seconds"])
        cuts += [("launch, planning, opening the read", 0.0, job["start"]),
                 ("staging: Spark's JDBC read -> Parquet job", job["start"], job["start"] + job["seconds"]),
                 ("validation, commit split, publish, materializations", job["start"] + job["seconds"], last),
                 ("run end, answer, release_memory", last, float("inf"))]
    else:
        cuts.append(("the request", 0.0, float("inf")))
    out = {}
    for name, lo, hi in cuts:
        inside = [s for s in samples if lo <= s[0] < hi] or ([samples[0]] if hi <= 0.0 else [])
        if inside:
            out[name] = (max(s[1] for s in inside), max(s[2] for s in inside))
    return out


def quiet(max_load: float | None, max_wait: float) -> None:
    """Wait for the machine to be quieter than ``max_load`` (others share it), ``max_wait`` seconds at most."""
    deadline = time.monotonic() + max_wait
    while max_load is not None and os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenant-rows", type=int, default=500_000)
    parser.add_argument("--c-tenants", type=int, default=200)
    parser.add_argument("--c-rows", type=int, default=5_000_000)
    parser.add_argument("--destinations", default="delta,postgres")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples a second")
    parser.add_argument("--instance", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument("--model-start", default="2025-01-01")
    parser.add_argument("--data-days", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true", help="time the runs without py-spy and the event log")
    parser.add_argument("--max-load", type=float, help="before each run, wait until the 1-minute load average is below this")
    parser.add_argument("--max-wait", type=float, default=900, help="seconds to wait for --max-load at most, then run anyway")
    parser.add_argument("--out", help="keep the profiles, event logs and runs.json here (default: a temporary folder)")
    parser.add_argument("--analyze", help="print the tables of a kept --out folder and stop")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or str(BIN / "py-spy"), help="the py-spy executable")
    args = parser.parse_args()
    if args.analyze:
        analyze(Path(args.analyze))
        return
    pyspy = args.py_spy
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out or tempfile.mkdtemp(prefix="incsync-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="incsync-profile-work-"))
    user = pg_user()
    source_db, dest_db = f"incsync_prof_src_{uuid.uuid4().hex[:6]}", f"incsync_prof_dst_{uuid.uuid4().hex[:6]}"
    now = datetime.now(timezone.utc)
    data_start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=args.data_days)
    admin = psycopg.connect(host=HOST, port=PORT, user=user, dbname="postgres", autocommit=True)
    instances = Instances(host=HOST, port=PORT, user=user)
    runs: list[dict[str, object]] = []
    try:
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        with psycopg.connect(host=HOST, port=PORT, user=user, dbname=source_db, autocommit=True) as conn:
            sizes = generate(conn, tenant_rows=args.tenant_rows, c_tenants=args.c_tenants, c_rows=args.c_rows,
                             start=data_start, end=now - timedelta(minutes=10))
        print(f"generated {sum(sizes.values()):,} rows, {len(sizes)} tenants", flush=True)
        bench_args = argparse.Namespace(config="all", queries=1, port=0)
        model_start = datetime.fromisoformat(args.model_start).replace(tzinfo=timezone.utc)
        bench = Bench(bench_args, work, user, source_db, dest_db, model_start, instances, sizes)
        for rep in range(args.repeat):
            for destination in args.destinations.split(","):
                folder = f"{destination}_{rep}"
                rep_dir = out / folder
                rep_dir.mkdir(parents=True, exist_ok=True)
                config = bench.incsync_config(f"prof_{destination[:2]}_{rep}_{uuid.uuid4().hex[:4]}", destination,
                                              list(sizes), connect=False, instance=args.instance)
                if not args.no_profile:  # Spark's event log without touching the config: spark-defaults.conf
                    events = rep_dir / "spark-events"
                    events.mkdir(exist_ok=True)
                    conf = rep_dir / "spark-conf"
                    conf.mkdir(exist_ok=True)
                    (conf / "spark-defaults.conf").write_text(
                        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
                        "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n")
                    bench.instance_env.setdefault(config, {})["SPARK_CONF_DIR"] = str(conf)
                settle(admin)
                quiet(args.max_load, args.max_wait)
                worker = bench.start_worker(config)
                spy = None
                try:
                    if not args.no_profile:
                        spy = subprocess.Popen([pyspy, "record", "--pid", str(worker.process.pid), "--rate", str(args.rate),
                                                "--idle", "--nonblocking", "--threads", "--format", "speedscope",
                                                "-o", str(rep_dir / "worker.speedscope.json")],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                        time.sleep(1.0)  # attached before the request
                    spy_started = time.time() - 1.0
                    load = os.getloadavg()
                    env = {**bench.incsync_env(config), WORKER_ENV_VAR: str(worker.socket)}
                    started = time.time()
                    sampler = RssSampler(worker.process.pid, worker.jvm, started)
                    wall, _, _, _, text = measure([str(BIN / "incsync"), "transfer", "orders", "--recipient", BIG, "--backfill"],
                                                  env, cwd=config.parent)
                    time.sleep(0.5)  # the worker's work after its answer (release_memory) in the profile too
                    rss = sampler.stop()
                    profiled = time.time() - spy_started
                    if spy is not None:
                        spy.send_signal(signal.SIGINT)
                        spy.wait(timeout=60)
                finally:
                    stop(worker)
                landed = bench.landed("worker", config.parent.name, destination, BIG)
                assert landed == sizes[BIG], f"{destination}: {landed} rows landed, the tenant has {sizes[BIG]}"
                run = {"destination": destination, "rep": rep, "folder": folder, "wall": wall, "load": load,
                       "profiled_seconds": profiled, "client_output": text[-2000:], "rss": rss,
                       "machine": f"{os.uname().nodename}, {os.cpu_count()} cores"}
                if not args.no_profile:
                    run["dagster"] = dagster_timeline(config.parent / ".dagster", started, bench.instance_env.get(config, {}))
                    run["spark_jobs"], run["spark_metrics"] = spark_jobs(rep_dir / "spark-events", started)
                settle(admin)
                _, _, _, _, floor_out = measure(
                    [str(BIN / "python"), str(Path(__file__).with_name("floor.py")), "--source-dsn", bench.dsn(source_db),
                     "--tenant", BIG, *(["--delta-path", str(work / f"floor_{folder}")] if destination == "delta"
                                        else ["--dest-dsn", bench.dsn(dest_db), "--schema", f"floor_{folder}"])],
                    dict(os.environ))
                run["floor"] = float(floor_out.split("seconds=")[1].split()[0])
                print(f"  A {destination} rep {rep}: worker {wall:.2f} s, floor {run['floor']:.2f} s, load {load[0]:.1f}", flush=True)
                runs.append(run)
                bench.done_with(config)
                shutil.rmtree(config.parent, ignore_errors=True)
                (out / "runs.json").write_text(json.dumps(runs, indent=1))
    finally:
        instances.close()
        for db in (source_db, dest_db):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.close()
        shutil.rmtree(work, ignore_errors=True)
    if not args.no_profile:
        analyze(out)
    else:
        for destination in args.destinations.split(","):
            walls = [r["wall"] for r in runs if r["destination"] == destination]
            floors = [r["floor"] for r in runs if r["destination"] == destination]
            print(f"A → {destination}: worker median {statistics.median(walls):.2f} s {walls}; floor {statistics.median(floors):.2f} s {floors}")
    if not args.out:
        print(f"(profiles kept in {out})")


if __name__ == "__main__":
    main()

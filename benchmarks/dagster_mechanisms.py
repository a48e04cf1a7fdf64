"""Dagster 1.13's own mechanisms beside incsync's hand-written ones (issue 49), each at a small real scale
on a throwaway instance (benchmarks/HISTORY.md, "`dagster_mechanisms.py`"):

  pools     a pool of limit 1 held by an in-process run, a second run waiting on it; the holder SIGKILLed
            (is the slot freed?), then marked failed as incsync's reaper does, then freed as the daemon's
            ``free_slots_after_run_end_seconds`` would: when the waiting run starts. Then ``claims``.
  claims    claim + free of a pool slot on Dagster's SQLite event log and on incsync's, against
            incsync's ``FileSlots``.
  monitor   a run worker SIGKILLed: an in-process run (what ``incsync transfer`` and the worker run), then
            runs a real ``dagster-daemon`` launched through its code server (the DefaultRunLauncher), the
            worker killed alone and with its code server: what Dagster marks and when, against ``reap``.
  batching  the runs Dagster's ``BackfillPolicy.multi_run`` makes of S (10,000 recipients x 2 windows) and
            C200 (200 recipients x 396 daily windows), and how long it takes to make them.
  events    storing 2,000 materializations as one batch: Dagster's SQLite event log against incsync's;
            300 planned events on PostgreSQL: dagster-postgres' own batch against incsync's.

    .venv/bin/python benchmarks/dagster_mechanisms.py pools|claims|monitor|batching|events
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path

JOB = textwrap.dedent('''
    import os, sys, time
    import dagster as dg

    @dg.asset(pool="bench_dest")
    def held(context) -> None:
        if os.environ.get("BENCH_MARK_RUNNING"):
            from incsync.operations.liveness import mark_running
            mark_running(context.instance, context.run_id)
        with open(os.environ["BENCH_MARKER"] + "." + context.run_id, "w") as f:
            f.write(f"{os.getpid()} {time.time()}")
        time.sleep(float(os.environ.get("BENCH_SLEEP", "600")))

    sleeper = dg.define_asset_job("sleeper", [held])
    defs = dg.Definitions(assets=[held], jobs=[sleeper], executor=dg.in_process_executor)  # as incsync's

    if __name__ == "__main__":
        with dg.DagsterInstance.get() as instance:
            defs.get_job_def("sleeper").execute_in_process(instance=instance)
''')

YAML = textwrap.dedent('''
    telemetry: {enabled: false}
    run_monitoring: {enabled: true, start_timeout_seconds: 180, poll_interval_seconds: 5}
    concurrency:
      pools: {granularity: op}
''')


def _home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="bench-dagster-mech-"))
    (home / "dagster.yaml").write_text(YAML)
    (home / "job.py").write_text(JOB)
    return home


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(home), "BENCH_MARKER": str(home / "started"),
            "PYTHONPATH": os.getcwd(), **extra}


def _started(home: Path) -> dict[str, tuple[int, float]]:
    out = {}
    for p in home.glob("started.*"):
        pid, at = p.read_text().split()
        out[p.name.split(".", 1)[1]] = (int(pid), float(at))
    return out


def _wait(pred, timeout: float, step: float = 0.1):  # noqa: ANN001, ANN202
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    return None


def pools() -> None:
    import dagster as dg


    home = _home()
    os.environ["DAGSTER_HOME"] = str(home)
    instance = dg.DagsterInstance.get()
    instance.event_log_storage.set_concurrency_slots("bench_dest", 1)
    a = subprocess.Popen([sys.executable, str(home / "job.py")], env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = _wait(lambda: _started(home), 120)
    assert first, "run A never started"
    run_a = next(iter(first))
    b = subprocess.Popen([sys.executable, str(home / "job.py")], env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(15)
    info = instance.event_log_storage.get_concurrency_info("bench_dest")
    print(f"two in-process runs, pool limit 1: after 15 s {len(_started(home))} started, "
          f"{info.active_slot_count} slot claimed, {info.pending_step_count} step pending")
    os.kill(first[run_a][0], signal.SIGKILL)
    a.wait()
    time.sleep(20)
    info = instance.event_log_storage.get_concurrency_info("bench_dest")
    status = instance.get_run_by_id(run_a).status.value
    print(f"holder SIGKILLed: 20 s later run A is {status}, {info.active_slot_count} slot claimed (by "
          f"{[s.run_id[:8] for s in info.claimed_slots]}), {len(_started(home))} run started")
    instance.report_run_failed(instance.get_run_by_id(run_a))
    time.sleep(10)
    info = instance.event_log_storage.get_concurrency_info("bench_dest")
    print(f"run A marked FAILURE (as incsync's reaper does): 10 s later {info.active_slot_count} slot claimed, "
          f"{len(_started(home))} run started")
    freed_at = time.time()
    instance.event_log_storage.free_concurrency_slots_for_run(run_a)
    second = _wait(lambda: len(_started(home)) > 1 and _started(home), 60)
    run_b = next(r for r in second if r != run_a) if second else None
    print(f"slot freed (the daemon's free_slots_after_run_end_seconds step): run B's step started "
          f"{(second[run_b][1] - freed_at) if run_b else float('nan'):.1f} s later")
    os.kill(second[run_b][0], signal.SIGKILL) if run_b else b.kill()
    b.wait()

    _claim_cost(home)


def _claim_cost(home: Path, n: int = 200) -> None:
    """Claim and free a pool slot ``n`` times on Dagster's SQLite event log and on incsync's (fsync off),
    against taking and releasing one of incsync's ``FileSlots``."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from incsync.operations.dagster_compat.sqlite import _batching_sqlite_event_log_storage
    from incsync.operations.slots import FileSlots

    for label, cls in (("Dagster's SQLite event log", SqliteEventLogStorage),
                       ("incsync's SQLite event log (synchronous off)", _batching_sqlite_event_log_storage())):
        storage = cls(tempfile.mkdtemp(prefix="bench-pool-"))
        storage.set_concurrency_slots("bench_cost", 1)
        t = time.perf_counter()
        for i in range(n):
            assert storage.claim_concurrency_slot("bench_cost", "bench-run", f"step{i}").is_claimed
            storage.free_concurrency_slot_for_step("bench-run", f"step{i}")
        print(f"claim + free a pool slot, {n} times, {label}: {(time.perf_counter() - t) / n * 1000:.2f} ms each")
        storage.dispose()
    slots = FileSlots(home / "incsync-slots")
    t = time.perf_counter()
    for _ in range(n):
        handle = slots.try_take("bench_cost", 0, "bench")
        assert handle is not None
        slots.release(handle)
    print(f"take + release incsync's FileSlots, {n} times: {(time.perf_counter() - t) / n * 1000:.3f} ms each")


def monitor() -> None:
    import dagster as dg
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import EmptyWorkspaceTarget
    from dagster._daemon.monitoring.run_monitoring import execute_run_monitoring_iteration

    from incsync.operations.liveness import reap

    home = _home()
    os.environ["DAGSTER_HOME"] = str(home)
    instance = dg.DagsterInstance.get()
    # 1. In process (incsync transfer, the worker): SIGKILL, then Dagster's run monitoring, then incsync's reap.
    p = subprocess.Popen([sys.executable, str(home / "job.py")], env=_env(home, BENCH_MARK_RUNNING="1"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = _wait(lambda: _started(home), 120)
    run_id = next(iter(started))
    killed_at = time.time()
    os.kill(started[run_id][0], signal.SIGKILL)
    p.wait()
    with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as ctx:
        for _ in range(3):
            list(execute_run_monitoring_iteration(ctx, dg.get_dagster_logger()))
            time.sleep(1)
    print(f"in-process run SIGKILLed: after 3 run-monitoring iterations ({time.time() - killed_at:.0f} s) "
          f"it is {instance.get_run_by_id(run_id).status.value}")
    t = time.perf_counter()
    marked = reap(instance)
    print(f"incsync reap: {marked == [run_id]} ({(time.perf_counter() - t) * 1000:.0f} ms), run now "
          f"{instance.get_run_by_id(run_id).status.value}")
    # 2. Launched by the daemon through its code server (the DefaultRunLauncher): the worker SIGKILLed, then
    # the worker and its code server SIGKILLed together (a host's OOM killer, a restarted daemon).
    daemon = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-f", str(home / "job.py")],
                              env=_env(home, BENCH_MARK_RUNNING="1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for case in ("the run worker", "the run worker and its code server"):
            for f in home.glob("started.*"):
                f.unlink()
            subprocess.run([sys.executable, "-m", "dagster", "job", "launch", "-f", str(home / "job.py"), "-j", "sleeper"],
                           env=_env(home), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started = _wait(lambda: _started(home), 240)
            assert started, "the daemon never started the run"
            run_id = next(iter(started))
            worker = started[run_id][0]
            server = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
            killed_at = time.time()
            if case != "the run worker":
                os.kill(server, signal.SIGKILL)
            os.kill(worker, signal.SIGKILL)
            failed = _wait(lambda: instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE and time.time(), 60)
            print(f"daemon-launched run, {case} SIGKILLed: "
                  + (f"FAILURE after {failed - killed_at:.1f} s" if failed
                     else f"still {instance.get_run_by_id(run_id).status.value} after 60 s (run monitoring polls every 5 s)"))
            if not failed:
                t = time.perf_counter()
                marked = reap(instance)
                print(f"incsync reap: {marked == [run_id]} ({(time.perf_counter() - t) * 1000:.0f} ms), run now "
                      f"{instance.get_run_by_id(run_id).status.value}")
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(30)


def batching() -> None:
    import dagster as dg
    from dagster._core.definitions.automation_tick_evaluation_context import _build_run_requests_with_backfill_policy
    from dagster._core.definitions.partitions.context import partition_loading_context

    from incsync.operations.launch import shards

    home = _home()
    os.environ["DAGSTER_HOME"] = str(home)
    instance = dg.DagsterInstance.get()
    ids = [f"r{i:05d}" for i in range(10_000)]
    instance.add_dynamic_partitions("recipients", ids)
    windows = dg.DailyPartitionsDefinition(start_date="2025-01-01", end_offset=1, timezone="UTC")
    pdef = dg.MultiPartitionsDefinition({"window": windows, "recipient": dg.DynamicPartitionsDefinition(name="recipients")})
    cases = {
        "S: 10,000 recipients x 2 windows": ([w for w in ["2026-01-30", "2026-01-31"]], ids),
        "C200: 200 recipients x 396 windows": ([w.strftime("%Y-%m-%d") for w in
                                                [windows.start + timedelta(days=d) for d in range(396)]], ids[:200]),
    }
    for name, (ws, rs) in cases.items():
        keys = frozenset(str(dg.MultiPartitionKey({"window": w, "recipient": r})) for w in ws for r in rs)
        t = time.perf_counter()
        store = instance  # the dynamic partitions store
        with partition_loading_context(dynamic_partitions_store=store):
            requests = _build_run_requests_with_backfill_policy(
                [dg.AssetKey("orders")], [], dg.BackfillPolicy.multi_run(1024), keys, pdef, {}, store)
            took = time.perf_counter() - t
            sizes = sorted({len(pdef.get_partition_keys_in_range(dg.PartitionKeyRange(r.partition_key_range.start, r.partition_key_range.end)))
                            for r in requests[:3]})
        print(f"{name} ({len(keys)} partitions), multi_run(1024): {len(requests)} runs in {took:.1f} s; first runs hold {sizes} partitions; "
              f"first range {requests[0].partition_key_range.start} .. {requests[0].partition_key_range.end}")
        t = time.perf_counter()
        ours = shards(rs, ids, 1000)  # launch.run_specs: one window range, recipients_per_run 1,000
        print(f"   incsync's launch (recipients_per_run 1,000): {len(ours)} run(s) of {len(ws)} windows x {len(ours[0])} recipients "
              f"in {(time.perf_counter() - t) * 1000:.0f} ms")


def events() -> None:
    import logging

    import dagster as dg
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from incsync.operations.dagster_compat import event_log_storage_config  # noqa: F401 - registers the class
    from incsync.operations.dagster_compat.sqlite import _batching_sqlite_event_log_storage

    n = 2000
    for label, cls in (("Dagster's SqliteEventLogStorage", SqliteEventLogStorage),
                       ("incsync's BatchingSqliteEventLogStorage", _batching_sqlite_event_log_storage())):
        base = tempfile.mkdtemp(prefix="bench-events-")
        storage = cls(base)
        entries = [
            EventLogEntry(user_message="", level=logging.INFO, job_name="orders", run_id="bench-run", error_info=None,
                          timestamp=time.time(), step_key="orders", dagster_event=DagsterEvent(
                              DagsterEventType.ASSET_MATERIALIZATION.value, "orders",
                              event_specific_data=StepMaterializationData(dg.AssetMaterialization(
                                  dg.AssetKey(["app_db", "orders"]), partition=f"2026-01-01|r{i:05d}",
                                  metadata={"rows_transferred": i}))))
            for i in range(n)
        ]
        t = time.perf_counter()
        storage.store_event_batch(entries)
        took = time.perf_counter() - t
        print(f"{label}: a batch of {n} materializations stored in {took:.2f} s ({took / n * 1000:.2f} ms an event)")
        storage.dispose()
    _planned_on_postgres(300)


def _planned_on_postgres(n: int) -> None:
    """dagster-postgres' own ``store_event_batch`` of planned events against incsync's ``store_planned_on_postgres``."""
    import logging
    import types

    import dagster as dg
    import psycopg
    from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent, DagsterEventType
    from dagster._core.events.log import EventLogEntry
    from dagster_postgres.event_log.event_log import PostgresEventLogStorage

    from incsync.operations.dagster_compat.postgres import store_planned_on_postgres

    db = f"incsync_bench_mech_{os.getpid()}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    try:
        storage = PostgresEventLogStorage(f"postgresql+psycopg2://postgres@127.0.0.1:5432/{db}")
        events = [DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION_PLANNED.value, "sleeper",
                               event_specific_data=AssetMaterializationPlannedData(
                                   dg.AssetKey(["app_db", "orders"]), partition=f"2026-01-01|r{i:05d}"), step_key="orders")
                  for i in range(n)]
        entries = [EventLogEntry(user_message="", level=logging.INFO, job_name="sleeper", run_id="bench-run",
                                 error_info=None, timestamp=time.time(), step_key="orders", dagster_event=e) for e in events]
        t = time.perf_counter()
        storage.store_event_batch(entries)
        stock = time.perf_counter() - t
        t = time.perf_counter()
        assert store_planned_on_postgres(types.SimpleNamespace(event_log_storage=storage), "bench-run-2", events)  # type: ignore[arg-type]
        ours = time.perf_counter() - t
        print(f"PostgreSQL, a batch of {n} planned events: dagster-postgres' store_event_batch {stock:.2f} s "
              f"({stock / n * 1000:.1f} ms an event); incsync's store_planned_on_postgres {ours:.2f} s")
        storage.dispose()
    finally:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


if __name__ == "__main__":
    {"pools": pools, "monitor": monitor, "batching": batching, "events": events, "claims": lambda: _claim_cost(_home())}[sys.argv[1]]()

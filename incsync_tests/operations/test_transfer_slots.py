"""Limits for every launch path: three `incsync transfer` processes of one (model, destination) run one
at a time for each destination kind, and the slots behind that (files for a SQLite instance, advisory
locks for a PostgreSQL one) wait, name their holder, and are released with their process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
import yaml

from incsync.operations.slots import FileSlots, PostgresSlots, Slot, holding, run_slots
from incsync_tests.support.destinations import KINDS, Target, destination_env, destination_spec, postgres_database
from incsync_tests.support.lake import lake_config, order, ts, write_table

MD_KEY = "model_destination:orders@acme_dest"
DEST_KEY = "destination:acme_dest"  # with max_concurrent_transfers 1 (the default), the slot of one transfer at a time


def test_run_slots_are_ordered_and_carry_each_limit() -> None:
    dest = [SimpleNamespace(name="b_pg", max_concurrent_transfers=2), SimpleNamespace(name="a_delta", max_concurrent_transfers=1)]
    slots = run_slots(model="orders", destinations=dest, sources=[SimpleNamespace(name="lake", max_concurrent_transfers=10)])
    assert [(s.key, s.limit) for s in slots] == [
        ("model_destination:orders@b_pg", 1),  # a_delta takes one transfer at a time anyway
        ("destination:a_delta", 1), ("destination:b_pg", 2), ("source:lake", 10),
    ]
    assert slots[2].what == "destination b_pg (max_concurrent_transfers 2)"


def _contend(make_backend, holder_a: str) -> list[str]:
    """A holds a limit-1 slot and one place of a limit-2 one: C takes the other place at once, B waits for A."""
    slot = Slot(0, MD_KEY, 1, "model orders → destination acme_dest (one transfer at a time)")
    two = Slot(1, "destination:acme_dest", 2, "destination acme_dest (max_concurrent_transfers 2)")
    events: list[str] = []
    a_in, a_out = threading.Event(), threading.Event()

    def a() -> None:
        with holding([slot, two], make_backend(holder_a), holder=holder_a, notify=events.append, poll=0.1):
            a_in.set()
            a_out.wait(30)
            events.append("A done")

    thread = threading.Thread(target=a)
    thread.start()
    assert a_in.wait(30)
    with holding([two], make_backend("C"), holder="C", notify=events.append, poll=0.1):
        events.append("C shares the limit-2 slot with A")  # no wait: a second place is free
    threading.Timer(0.5, a_out.set).start()
    with holding([slot, two], make_backend("B"), holder="B", notify=events.append, poll=0.1):
        events.append("B in")
    thread.join(30)
    return events


def test_file_slots_wait_for_the_holder_and_name_it(tmp_path: Path) -> None:
    events = _contend(lambda holder: FileSlots(tmp_path / "slots"), "incsync run 1234abcd (pid 1 on h)")
    assert events[0] == "C shares the limit-2 slot with A"
    assert events[1] == ("waiting: model orders → destination acme_dest (one transfer at a time) is taken by "
                         "incsync run 1234abcd (pid 1 on h); this transfer starts when it is free")
    assert events[2] == "A done" and events[3].startswith("model orders → destination acme_dest (one transfer at a time): free after ")
    assert events[4] == "B in"


def test_postgres_slots_wait_for_the_holder_and_name_it() -> None:
    with postgres_database() as dsn:
        url = "postgresql+psycopg2://" + dsn.split("://", 1)[1]
        events = _contend(lambda holder: PostgresSlots(url, holder), "incsync run 1234abcd (pid 1 on h)")
    assert events[:3] == [
        "C shares the limit-2 slot with A",
        "waiting: model orders → destination acme_dest (one transfer at a time) is taken by "
        "incsync run 1234abcd (pid 1 on h); this transfer starts when it is free",
        "A done",
    ]
    assert events[4] == "B in"


def test_a_killed_holder_frees_its_slot(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from incsync.operations.slots import FileSlots; "
            f"h = FileSlots(Path({str(tmp_path)!r})).try_take({MD_KEY!r}, 0, 'doomed'); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert FileSlots(tmp_path).try_take(MD_KEY, 0, "me") is None
    finally:
        proc.kill()
        proc.wait()
    assert FileSlots(tmp_path).try_take(MD_KEY, 0, "me") is not None


def _slot_intervals(home: Path) -> list[tuple[float, float]]:
    intervals = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for run in instance.get_runs():
            times = {e.user_message.split(":")[0]: e.timestamp for e in instance.all_logs(run.run_id)
                     if e.user_message.startswith("transfer slots ")}
            intervals.append((times["transfer slots taken"], times["transfer slots released"]))
    return sorted(intervals)


@pytest.mark.parametrize("kind", [k if k == "delta" else pytest.param(k, marks=pytest.mark.slow) for k in KINDS])  # one in make test
def test_three_cli_transfers_of_one_model_destination_run_one_at_a_time(
    kind: str, connect_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))])
    home = tmp_path / "home"
    with destination_env(kind, monkeypatch):
        file = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                           destinations=[destination_spec(kind)])
        doc = yaml.safe_load(file.read_text())
        doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}
        file.write_text(yaml.safe_dump(doc))
        env = {**os.environ, "DAGSTER_HOME": str(home)}
        from incsync.operations.instance import dagster_instance

        monkeypatch.setenv("DAGSTER_HOME", str(home))
        dagster_instance(file).dispose()  # the instance's folder and dagster.yaml, as the first command creates them
        # The test holds the destination's one slot until all three processes say they wait for it.
        gate = FileSlots(home / "incsync-slots")
        held = gate.try_take(DEST_KEY, 0, "the test")
        assert held is not None
        procs = []
        for i in range(3):
            with open(tmp_path / f"err{i}", "w") as err:
                procs.append(subprocess.Popen(
                    [str(Path(sys.executable).with_name("incsync")), "transfer", "orders", "--recipient", "acme",
                     "--window", "2024-01-01", "-c", str(file)], stdout=subprocess.PIPE, stderr=err, text=True, env=env))
        deadline = time.monotonic() + 120
        while sum("waiting: destination acme_dest (max_concurrent_transfers 1)" in (tmp_path / f"err{i}").read_text() for i in range(3)) < 3:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [
                (tmp_path / f"err{i}").read_text()[-2000:] for i in range(3)]
            time.sleep(0.5)
        assert "is taken by the test; this transfer starts when it is free" in (tmp_path / "err0").read_text()
        gate.release(held)
        outs = [p.communicate(timeout=180)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [(tmp_path / f"err{i}").read_text()[-3000:] for i in range(3)]
        target = Target(file)
        rows = [(r["id"], r["updated_at"]) for r in target.rows()]
        state = target.state()

    intervals = _slot_intervals(home)
    assert len(intervals) == 3
    assert all(end <= nxt for (_, end), (nxt, _) in zip(intervals, intervals[1:], strict=False)), intervals  # one at a time
    deltas = sorted(int(line.split("delta_rows_transferred=")[1].split()[0]) for out in outs for line in out.splitlines()
                    if line.startswith("orders"))
    assert deltas == [0, 0, 2]  # the first committed both rows; the others found them there (no lease retry)
    assert rows == [(1, ts(1, 1)), (2, ts(1, 2))]
    assert state.high_watermark == ts(1, 2)
    errors = "".join((tmp_path / f"err{i}").read_text() for i in range(3))
    assert "starting over from the new state" not in errors

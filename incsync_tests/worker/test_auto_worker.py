"""`incsync transfer` hands its transfer to a worker it starts on first use (incsync.worker.auto): real CLI
processes, a real detached worker, a lake source and a real PostgreSQL destination, Spark through the suite's
Connect server. The tests share one runtime folder and one worker and run in this file's order: each says
what it expects to find."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import yaml

from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.lake import lake_config, order, ts, write_table

INCSYNC = str(Path(sys.executable).with_name("incsync"))
DSN_ENV = "INCSYNC_TEST_AUTO_WORKER_DSN"


@dataclass
class Setup:
    root: Path
    config: Path
    runtime: Path  # XDG_RUNTIME_DIR; the workers' folder is runtime/incsync
    env: dict[str, str]
    dsn: str

    @property
    def folder(self) -> Path:
        return self.runtime / "incsync"

    def files(self, suffix: str) -> list[Path]:
        return sorted(self.folder.glob(f"*{suffix}")) if self.folder.exists() else []

    def pid(self) -> int:
        [pid_file] = self.files(".pid")
        return int(pid_file.read_text())

    def workers(self) -> list[int]:
        """The processes running `incsync worker --auto` on one of this setup's sockets."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--auto" in argv and any(a.startswith(os.fsencode(self.folder)) for a in argv) and _alive(int(entry.name)):
                found.append(int(entry.name))
        return [pid for pid in found if _parent(pid) not in found]  # not a process the worker forked

    def log(self) -> str:
        return "\n".join(f.read_text(errors="replace")[-3000:] for f in self.files(".log"))

    def rows(self) -> list[tuple[int, str]]:
        with psycopg.connect(self.dsn) as conn:
            return [(r[0], r[1]) for r in conn.execute("SELECT id, organization_id FROM acme.orders ORDER BY id")]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


def _starts(setup: Setup) -> int:
    """How many workers `incsync transfer` calls started in this setup's folder (each notes it in the log)."""
    return sum(f.read_text(errors="replace").count(": starting a worker (") for f in setup.files(".log"))


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"worker {pid} still runs"
        time.sleep(0.1)


def _cli(setup: Setup, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run([INCSYNC, *args, "-c", str(setup.config)], capture_output=True, text=True, timeout=300,
                         env=env or setup.env)
    return out, time.monotonic() - started


def _lines(stdout: str) -> list[tuple[str, ...]]:
    return [tuple(line.split()[2:6]) for line in stdout.splitlines() if line.startswith("orders")]


@pytest.fixture(scope="module")
def setup(connect_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("auto")
    write_table(root / "src", "orders", [
        order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 5)), order(3, "org_1", ts(2)), order(4, "org_2", ts(1, 5)),
        order(5, "org_1", ts(3, 1)), order(6, "org_1", ts(4, 1)), order(7, "org_1", ts(5, 1)), order(8, "org_1", ts(6, 1)),
        order(9, "org_1", ts(7, 1)), order(10, "org_1", ts(7, 2)), order(10, "org_1", ts(8, 1)), order(10, "org_1", ts(8, 2)),
        order(11, "org_1", ts(9, 1)),
    ])
    config = lake_config(root, destinations=[{"name": "acme_delta", "kind": "postgres", "dsn_env": DSN_ENV, "schema": "acme"}])
    doc = yaml.safe_load(config.read_text())
    doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    runtime = Path(tempfile.mkdtemp(prefix="isw-", dir="/tmp"))  # short: a socket path holds 107 bytes
    with postgres_database() as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA acme")
        env = {k: v for k, v in os.environ.items() if k not in ("INCSYNC_AUTO_WORKER", "INCSYNC_WORKER")} | {
            "DAGSTER_HOME": str(root / "home"), "XDG_RUNTIME_DIR": str(runtime), DSN_ENV: dsn,
            "INCSYNC_STAGING_DIR": str(root / "staging"),
        }
        setup = Setup(root, config, runtime, env, dsn)
        try:
            yield setup
        finally:
            for pid in setup.workers():
                os.kill(pid, signal.SIGTERM)
                _wait_gone(pid)
            leftovers = setup.files(".sock")
            shutil.rmtree(runtime, ignore_errors=True)
    assert leftovers == [], "a stopped worker leaves no socket"


def test_the_first_call_starts_a_worker_and_the_second_reuses_it(setup: Setup) -> None:
    assert setup.workers() == []
    first, first_s = _cli(setup, "transfer", "orders", "--window", "2024-01-01")
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""  # not a terminal: no progress message
    assert first.stdout.splitlines()[0] == "transfer orders → acme: 1 window(s) 2024-01-01 .. 2024-01-01"
    assert _lines(first.stdout) == [("2024-01-01", "rows_transferred=2", "delta_rows_transferred=2",
                                     "high_watermark=2024-01-01T05:00:00+00:00")]
    [pid] = setup.workers()
    assert setup.pid() == pid
    assert oct(setup.folder.stat().st_mode & 0o777) == "0o700"
    [sock] = setup.files(".sock")
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    second, second_s = _cli(setup, "transfer", "orders", "--window", "2024-01-02")
    assert second.returncode == 0, second.stderr
    assert _lines(second.stdout) == [("2024-01-02", "rows_transferred=1", "delta_rows_transferred=1",
                                      "high_watermark=2024-01-02T00:00:00+00:00")]
    assert setup.workers() == [pid]  # the same worker
    assert setup.rows() == [(1, "org_1"), (2, "org_1"), (3, "org_1")]
    assert second_s < first_s
    # The caller stays a thin client: no Dagster, pydantic, pyspark or delta-rs imported to hand it over.
    probe = ("import sys; from incsync.cli.main import main; code = main(sys.argv[1:]); print('heavy imports:', sorted("
             "m for m in ('dagster', 'pydantic', 'pyspark', 'deltalake', 'pyarrow') if m in sys.modules)); sys.exit(code)")
    third = subprocess.run([sys.executable, "-c", probe, "transfer", "orders", "--window", "2024-01-02", "-c", str(setup.config)],
                           capture_output=True, text=True, timeout=300, env=setup.env)
    assert third.returncode == 0, third.stderr
    assert third.stdout.splitlines()[-1] == "heavy imports: []"
    assert setup.workers() == [pid]
    print(f"first call (starts the worker) {first_s:.2f} s, second {second_s:.2f} s")


def test_output_exit_code_and_json_match_a_run_in_this_process(setup: Setup) -> None:
    [pid] = setup.workers()
    here, _ = _cli(setup, "transfer", "orders", "--window", "2024-01-03", "--no-worker")
    there, _ = _cli(setup, "transfer", "orders", "--window", "2024-01-03")
    assert (here.returncode, there.returncode, here.stderr, there.stderr) == (0, 0, "", "")
    assert here.stdout.splitlines()[0] == there.stdout.splitlines()[0]
    assert _lines(here.stdout) == [("2024-01-03", "rows_transferred=1", "delta_rows_transferred=1",
                                    "high_watermark=2024-01-03T01:00:00+00:00")]
    assert _lines(there.stdout) == [("2024-01-03", "rows_transferred=1", "delta_rows_transferred=0",  # unchanged since
                                     "high_watermark=2024-01-03T01:00:00+00:00")]
    # A failed transfer (a duplicate key in its window): the same exit status, JSON and error, both ways.
    failed = [_cli(setup, "transfer", "orders", "--window", "2024-01-08", "--json", *flag)[0] for flag in (["--no-worker"], [])]
    assert [f.returncode for f in failed] == [1, 1]
    assert failed[0].stderr.splitlines()[0] == failed[1].stderr.splitlines()[0] == (
        "error: ValidationError: model orders, recipient acme: 1 primary key value(s) (id) occur more than once in "
        "the batch: (10); nothing was published. Fix the source or choose a primary_key that is unique."
    )
    docs = [json.loads(f.stdout) for f in failed]
    for doc in docs:
        for run in doc["runs"]:
            run["run_id"] = "-"
            for line in run["transfers"]:
                line.pop("duration_seconds", None)
    assert docs[0] == docs[1]
    assert (docs[1]["ok"], [t["window"] for t in docs[1]["runs"][0]["transfers"]]) == (False, ["2024-01-08"])
    [(here_log, _), (worker_log, _)] = [f.stderr.splitlines()[1].rsplit(" ", 1) for f in failed]
    assert here_log == worker_log == "Dagster's and Spark's output:"  # the worker's own log
    assert [len(f.stderr.splitlines()) for f in failed] == [2, 2]
    assert failed[1].stderr.splitlines()[1].endswith(".log") and str(setup.folder) in failed[1].stderr
    assert setup.workers() == [pid]


def test_a_killed_worker_is_replaced_and_the_transfer_runs_once(setup: Setup) -> None:
    [pid] = setup.workers()
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    assert len(setup.files(".sock")) == 1  # left behind
    out, _ = _cli(setup, "transfer", "orders", "--window", "2024-01-04")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    [new] = setup.workers()
    assert new != pid
    assert setup.rows() == [(1, "org_1"), (2, "org_1"), (3, "org_1"), (5, "org_1"), (6, "org_1")]
    listing, _ = _cli(setup, "transfers", "--json")
    windows = [t["windows"] for t in json.loads(listing.stdout) if t["status"] == "SUCCESS"]
    assert sorted(windows) == [1] * 6  # 01-01, 01-02 and 01-03 twice each, 01-04 once


def test_a_hung_worker_is_killed_and_replaced(setup: Setup) -> None:
    [pid] = setup.workers()
    os.kill(pid, signal.SIGSTOP)  # alive, its socket open, and no answer to a ping
    try:
        out, seconds = _cli(setup, "transfer", "orders", "--window", "2024-01-05")
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGCONT)
    assert out.returncode == 0, out.stderr
    _wait_gone(pid)
    [new] = setup.workers()
    assert new != pid
    assert (7, "org_1") in setup.rows()
    print(f"a hung worker replaced in {seconds:.2f} s")


def test_a_changed_config_restarts_the_worker_and_it_exits_when_idle(setup: Setup) -> None:
    [pid] = setup.workers()
    doc = yaml.safe_load(setup.config.read_text())
    doc["worker"] = {"idle_exit_seconds": 3}
    setup.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    # Standard error a terminal: the caller says it starts a worker, and when it is ready.
    terminal, client_side = pty.openpty()
    try:
        out = subprocess.run([INCSYNC, "transfer", "orders", "--window", "2024-01-06", "-c", str(setup.config)],
                             stdout=subprocess.PIPE, stderr=client_side, text=True, timeout=300, env=setup.env)
        os.close(client_side)
        said = b""
        with contextlib.suppress(OSError):  # EIO: the client closed its end
            while chunk := os.read(terminal, 4096):
                said += chunk
    finally:
        os.close(terminal)
    assert out.returncode == 0, said
    _wait_gone(pid)  # asked to stop
    [new] = setup.workers()
    assert new != pid
    lines = said.decode().splitlines()
    assert lines[0].startswith(f"incsync: starting a worker for {setup.config} (once; later calls reuse it until it "
                               "idles; --no-worker runs here; log "), lines
    assert lines[1].startswith(f"incsync: worker {new} ready in "), lines
    assert not any(line.startswith("incsync: ") for line in lines[2:]), lines  # then the worker's progress line
    assert "serves another config content or install: asked to stop" in setup.log()
    assert (8, "org_1") in setup.rows()
    [sock] = setup.files(".sock")
    _wait_gone(new, timeout=60)  # 3 s without a transfer
    assert not sock.exists()
    assert setup.files(".sock") == []


def test_two_first_calls_at_once_start_one_worker(setup: Setup) -> None:
    assert setup.workers() == [] and setup.files(".sock") == []
    started = _starts(setup)
    calls = [subprocess.Popen([INCSYNC, "transfer", "orders", "--window", window, "-c", str(setup.config)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=setup.env)
             for window in ("2024-01-07", "2024-01-09")]
    seen: set[int] = set()
    while any(c.poll() is None for c in calls):
        seen.update(setup.workers())
        time.sleep(0.05)
    outs = [c.communicate() for c in calls]
    assert [c.returncode for c in calls] == [0, 0], outs
    # (delta_rows_transferred depends on which of the two the worker ran first: rows older than the HW count as none)
    assert [line[:2] for line in _lines(outs[0][0]) + _lines(outs[1][0])] == [
        ("2024-01-07", "rows_transferred=2"), ("2024-01-09", "rows_transferred=1")]
    assert [r[0] for r in setup.rows()] == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert len(seen) == 1, (seen, setup.log())
    assert _starts(setup) == started + 1, setup.log()


def test_opting_out_runs_here_and_starts_no_worker(setup: Setup) -> None:
    probe = ("import sys; from incsync.cli.main import main; code = main(sys.argv[1:]); "
             "print('dagster here:', 'dagster' in sys.modules); sys.exit(code)")
    elsewhere = Path(tempfile.mkdtemp(prefix="isw-", dir="/tmp"))
    try:
        for extra, env in ((["--no-worker"], {}), ([], {"INCSYNC_AUTO_WORKER": "0"})):
            out = subprocess.run([sys.executable, "-c", probe, "transfer", "orders", "--window", "2024-01-02", *extra,
                                  "-c", str(setup.config)], capture_output=True, text=True, timeout=300,
                                 env=setup.env | {"XDG_RUNTIME_DIR": str(elsewhere)} | env)
            assert out.returncode == 0, out.stderr
            assert [line[:2] for line in _lines(out.stdout)] == [("2024-01-02", "rows_transferred=1")]
            assert out.stdout.splitlines()[-1] == "dagster here: True"
            assert list(elsewhere.iterdir()) == []
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_a_worker_that_cannot_start_leaves_the_transfer_to_the_caller(setup: Setup) -> None:
    folder = Path(tempfile.mkdtemp(prefix="isw-", dir="/tmp"))
    try:
        (folder / "incsync").mkdir(mode=0o755)
        (folder / "incsync").chmod(0o755)
        out, _ = _cli(setup, "transfer", "orders", "--window", "2024-01-02", env=setup.env | {"XDG_RUNTIME_DIR": str(folder)})
        assert out.returncode == 0, out.stderr
        assert out.stderr == (f"incsync: the worker folder {folder}/incsync must belong to you with mode 0700 "
                              f"(chmod 700 {folder}/incsync); running the transfer in this process\n")
        assert _lines(out.stdout)[0][1] == "rows_transferred=1"
        assert list((folder / "incsync").iterdir()) == []
        deep = folder / ("d" * 100)  # no socket path fits under it
        out, _ = _cli(setup, "transfer", "orders", "--window", "2024-01-02", env=setup.env | {"XDG_RUNTIME_DIR": str(deep)})
        assert out.returncode == 0, out.stderr
        assert out.stderr.startswith(f"incsync: the worker socket path {deep}/incsync/")
        assert out.stderr.endswith(" is longer than a socket path may be; set XDG_RUNTIME_DIR to a shorter folder; "
                                   "running the transfer in this process\n")
        assert _lines(out.stdout)[0][1] == "rows_transferred=1"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_config_and_the_environment_decide_whether_a_worker_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.worker.auto import wanted

    monkeypatch.delenv("INCSYNC_AUTO_WORKER", raising=False)
    file = lake_config(tmp_path)
    assert wanted(file)  # the default
    doc = yaml.safe_load(file.read_text())
    for section, expected in (({"idle_exit_seconds": 60}, True), ({"auto_start": True}, True), ({"auto_start": False}, False),
                              (None, True)):
        file.write_text(yaml.safe_dump({**doc, "worker": section}))
        assert wanted(file) is expected, section
    file.write_text(yaml.safe_dump(doc))
    for value, expected in (("0", False), ("off", False), ("FALSE", False), ("1", True), ("", True)):
        monkeypatch.setenv("INCSYNC_AUTO_WORKER", value)
        assert wanted(file) is expected, value
    assert not wanted(tmp_path / "missing.yaml")  # the run here says what is wrong with it

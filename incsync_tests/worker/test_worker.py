"""`incsync worker`: transfers handed over a Unix socket run in the resident process, with the same
results, output and Dagster records as in-process ones, from a client that imports neither Dagster nor
pydantic."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

INCSYNC = str(Path(sys.executable).with_name("incsync"))


@dataclass
class RunningWorker:
    config: Path
    socket: Path
    env: dict[str, str]
    process: subprocess.Popen[str]


def _client(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run([INCSYNC, *args], capture_output=True, text=True, timeout=300, env=env)
    return out, time.monotonic() - started


def _transfer_lines(stdout: str) -> list[tuple[str, ...]]:
    return [tuple(line.split()[2:6]) for line in stdout.splitlines() if line.startswith("orders")]


@pytest.fixture
def worker(connect_port: int, tmp_path: Path) -> Iterator[RunningWorker]:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 23, 59, 59, 999_999)),
        order(3, "org_1", ts(2)), order(4, "org_2", ts(1, 5)),
        order(5, "org_1", ts(3, 1)), order(5, "org_1", ts(3, 2)),  # a duplicate key in window 2024-01-03
    ])
    file = lake_config(tmp_path)
    doc = yaml.safe_load(file.read_text())
    doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}
    file.write_text(yaml.safe_dump(doc))
    socket_path = tmp_path / "w.sock"
    env = {k: v for k, v in os.environ.items() if k != "INCSYNC_WORKER"} | {"DAGSTER_HOME": str(tmp_path / "home")}
    process = subprocess.Popen([INCSYNC, "worker", "-c", str(file), "--socket", str(socket_path)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if line.strip().startswith("export INCSYNC_WORKER="):
            break
    assert lines[-1].strip() == f"export INCSYNC_WORKER={socket_path}", "".join(lines)
    assert oct(socket_path.stat().st_mode & 0o777) == "0o600"
    try:
        yield RunningWorker(file, socket_path, env, process)
    finally:
        process.terminate()
        assert process.wait(timeout=60) == 0
        assert not socket_path.exists()


def test_transfers_through_the_worker_match_in_process_ones(worker: RunningWorker, tmp_path: Path) -> None:
    env, sock, file = worker.env, str(worker.socket), str(worker.config)
    first, first_s = _client("transfer", "orders", "--recipient", "acme", "--window", "2024-01-01", "-c", file,
                             "--worker", sock, env=env)
    assert first.returncode == 0, first.stderr
    second, second_s = _client("transfer", "orders", "--recipient", "acme", "--window", "2024-01-02", "-c", file,
                               env=env | {"INCSYNC_WORKER": sock})
    assert second.returncode == 0, second.stderr
    assert first.stdout.splitlines()[0] == "transfer orders → acme: 1 window(s) 2024-01-01 .. 2024-01-01"
    assert _transfer_lines(first.stdout + second.stdout) == [
        ("2024-01-01", "rows_transferred=2", "delta_rows_transferred=2", "high_watermark=2024-01-01T23:59:59.999999+00:00"),
        ("2024-01-02", "rows_transferred=2", "delta_rows_transferred=2", "high_watermark=2024-01-02T00:00:00+00:00"),
    ]
    assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [
        (1, ts(1, 1)), (2, ts(1, 23, 59, 59, 999_999)), (3, ts(2))
    ]
    # The runs are in the instance the client's DAGSTER_HOME names, as if it had run them itself.
    listing, _ = _client("transfers", "-c", file, env=env)
    rows = [line.split()[2:10] for line in listing.stdout.splitlines()[1:-1]]
    assert rows == [["SUCCESS", "-", "manual", "orders", "acme", "1", "2", "2"]] * 2  # "-": nobody to blame
    assert listing.stdout.splitlines()[-1] == "orders: SUCCESS 2"
    print(f"worker client processes: {first_s:.2f} s and {second_s:.2f} s")


def test_a_first_sync_through_the_worker_marks_every_delivered_window(worker: RunningWorker, tmp_path: Path) -> None:
    """docs/design.md#the-partition-view through the worker: `incsync transfer orders` finds acme without a
    transfer record and re-syncs it from the model's start as one full refresh, which marks every window of
    that span with its own rows, not only the two the command was given."""
    import dagster as dg

    env, sock, file = worker.env, str(worker.socket), str(worker.config)
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 5)),
                                             order(3, "org_1", ts(4)), order(4, "org_2", ts(2))])
    out, _ = _client("transfer", "orders", "-c", file, "--worker", sock, env=env)
    assert out.returncode == 0, out.stderr
    today = datetime.now(UTC).date()
    windows = [str(date(2024, 1, 1) + timedelta(days=n)) for n in range((today - date(2024, 1, 1)).days + 1)]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        model = dg.AssetKey(["lake", "orders"])
        assert instance.get_materialized_partitions(model) == {f"acme|{w}" for w in windows}
        rows = {r.asset_materialization.partition: r.asset_materialization.metadata["rows_transferred"].value
                for r in instance.fetch_materializations(model, limit=len(windows) + 10).records}
    assert len(rows) == len(windows)
    assert {w: n for w, n in rows.items() if n} == {"acme|2024-01-01": 2, "acme|2024-01-04": 1}
    assert sorted(r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")) == [1, 2, 3]


def test_the_client_imports_neither_dagster_nor_pydantic(worker: RunningWorker) -> None:
    probe = (
        "import sys; from incsync.cli.main import main; code = main(sys.argv[1:]); "
        "print('heavy imports:', sorted(m for m in ('dagster', 'pydantic', 'pyspark', 'deltalake') if m in sys.modules)); "
        "sys.exit(code)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, "transfer", "orders", "--recipient", "acme", "--window", "2024-01-01",
         "-c", str(worker.config), "--worker", str(worker.socket)],
        capture_output=True, text=True, timeout=300, env=worker.env,
    )
    assert out.returncode == 0, out.stderr
    assert _transfer_lines(out.stdout) == [
        ("2024-01-01", "rows_transferred=2", "delta_rows_transferred=2", "high_watermark=2024-01-01T23:59:59.999999+00:00")
    ]
    assert out.stdout.splitlines()[-1] == "heavy imports: []"


def test_a_failed_transfer_reports_its_error_and_the_worker_carries_on(worker: RunningWorker, tmp_path: Path) -> None:
    env, sock, file = worker.env, str(worker.socket), str(worker.config)
    failed, _ = _client("transfer", "orders", "--recipient", "acme", "--window", "2024-01-03", "-c", file,
                        "--worker", sock, env=env)
    assert failed.returncode == 1
    assert failed.stdout.splitlines()[-1].split()[2:4] == ["2024-01-03", "FAILED"]
    assert failed.stderr.strip() == (
        "error: ValidationError: model orders, recipient acme: 1 primary key value(s) (id) occur more than once in "
        "the batch: (5); nothing was published. Fix the source or choose a primary_key that is unique."
    )
    assert not (tmp_path / "out" / "acme" / "orders").exists()
    ok, _ = _client("transfer", "orders", "--recipient", "acme", "--window", "2024-01-02", "-c", file,
                    "--worker", sock, env=env)
    assert ok.returncode == 0, ok.stderr
    assert _transfer_lines(ok.stdout) == [
        ("2024-01-02", "rows_transferred=2", "delta_rows_transferred=2", "high_watermark=2024-01-02T00:00:00+00:00")
    ]


def test_the_worker_refuses_another_file_another_instance_and_a_second_worker(worker: RunningWorker, tmp_path: Path) -> None:
    env, sock = worker.env, str(worker.socket)
    other = tmp_path / "other"
    other.mkdir()
    other_file = lake_config(other)
    wrong_file, _ = _client("transfer", "orders", "--recipient", "acme", "-c", str(other_file), "--worker", sock, env=env)
    assert (wrong_file.returncode, wrong_file.stderr.strip()) == (2, (
        f"error: this worker serves {worker.config.resolve()}, not {other_file.resolve()}; "
        "start a worker for that file or drop --worker"
    ))
    wrong_home, _ = _client("transfer", "orders", "--recipient", "acme", "-c", str(worker.config), "--worker", sock,
                            env=env | {"DAGSTER_HOME": str(other / "home")})
    assert (wrong_home.returncode, wrong_home.stderr.strip()) == (2, (
        f"error: this worker records runs in the Dagster instance at {(tmp_path / 'home').resolve()}, the client "
        f"expects {(other / 'home').resolve()}; give both the same DAGSTER_HOME"
    ))
    second, _ = _client("worker", "-c", str(worker.config), "--socket", sock, "--no-warm", env=env)
    assert (second.returncode, second.stderr.strip()) == (
        1, f"error: another incsync worker already answers at {sock}; stop it or pass another --socket"
    )
    assert worker.process.poll() is None and worker.socket.exists()


def test_allow_mass_delete_runs_here_not_through_the_worker(tmp_path: Path, spark, monkeypatch) -> None:
    """Its help says so, and the worker's request does not carry the flag: it must not be dropped silently."""
    from incsync.cli.main import main

    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1))])
    file = lake_config(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    nobody = str(tmp_path / "nobody.sock")  # forwarded, it would fail: no worker answers there
    assert main(["transfer", "orders", "--window", "2024-01-01", "--allow-mass-delete", "-c", str(file), "--worker", nobody]) == 0
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1]


def test_no_worker_at_the_socket_is_a_clear_error(tmp_path: Path) -> None:
    file = lake_config(tmp_path)
    sock = tmp_path / "nobody.sock"
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path / "home"))
    out, _ = _client("transfer", "orders", "--recipient", "acme", "-c", str(file), "--worker", str(sock), env=env)
    assert (out.returncode, out.stderr.strip()) == (1, (
        f"error: no incsync worker answers at {sock}: start one with `incsync worker -c {file.resolve()} --socket {sock}`, "
        "or run in this process by dropping --worker and unsetting INCSYNC_WORKER"
    ))
    assert out.stdout == ""


def test_garbage_and_silent_clients_do_not_hold_the_worker(worker: RunningWorker) -> None:
    import socket

    with socket.socket(socket.AF_UNIX) as garbage:
        garbage.connect(str(worker.socket))
        garbage.sendall(b"not json\n")
        assert garbage.recv(100) == b""  # the worker hangs up
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(str(worker.socket))  # and never says a word
    try:
        out, seconds = _client("transfer", "orders", "--recipient", "acme", "--window", "2024-01-01",
                               "-c", str(worker.config), "--worker", str(worker.socket), env=worker.env)
    finally:
        silent.close()
    assert out.returncode == 0, out.stderr
    assert _transfer_lines(out.stdout)[0][1] == "rows_transferred=2"
    assert seconds < 60, f"the silent client held the worker for {seconds:.0f} s"


def test_json_and_progress_through_the_worker(worker: RunningWorker) -> None:
    """`--json` and `--from/--to` go to the worker too (the client still imports no Dagster), and a client
    whose standard error is a terminal sees the worker's progress line drawn there."""
    probe = (
        "import sys; from incsync.cli.main import main; code = main(sys.argv[1:]); "
        "print('heavy imports:', sorted(m for m in ('dagster', 'pydantic', 'pyspark') if m in sys.modules)); sys.exit(code)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, "transfer", "orders", "--recipient", "acme", "--window", "2024-01-01", "--json",
         "-c", str(worker.config), "--worker", str(worker.socket)],
        capture_output=True, text=True, timeout=300, env=worker.env,
    )
    assert out.returncode == 0, out.stderr
    first, last = out.stdout.splitlines()[0], out.stdout.splitlines()[-1]
    assert last == "heavy imports: []"  # the worker ran it
    doc = json.loads(first)
    assert (doc["model"], doc["mode"], doc["ok"]) == ("orders", "manual", True)
    assert [(t["recipient"], t["window"], t["rows_transferred"], t["high_watermark"])
            for run in doc["runs"] for t in run["transfers"]] == [("acme", "2024-01-01", 2, "2024-01-01T23:59:59.999999+00:00")]

    terminal, client_side = pty.openpty()
    fcntl.ioctl(client_side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))  # 200 columns
    drawn: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # EIO: the client closed its end
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        ranged = subprocess.run(
            [INCSYNC, "transfer", "orders", "--recipient", "acme", "--from", "2024-01-01", "--to", "2024-01-02",
             "--verbose", "-c", str(worker.config), "--worker", str(worker.socket)],
            stdout=subprocess.PIPE, stderr=client_side, text=True, timeout=300, env=worker.env,
        )
    finally:
        os.close(client_side)
        reader.join(timeout=10)
        os.close(terminal)
    screen = b"".join(drawn).decode(errors="replace")
    assert ranged.returncode == 0, screen[-2000:]
    assert ranged.stdout.splitlines()[0] == "transfer orders → acme: 2 window(s) 2024-01-01 .. 2024-01-02"
    assert "windows 0/2 · rows 0 · ETA ?" in screen, screen[-2000:]  # drawn when the run starts
    assert "windows 2/2 · rows 3 · " in screen, screen[-2000:]  # and as the windows commit (2024-01-01: 2 rows again)
    # --verbose reaches the worker: a line per window, drawn under the progress line as wide as the
    # client's terminal, not wrapped at 80.
    assert "orders       acme         2024-01-02        rows_transferred=1        delta_rows_transferred=1" in screen
    assert ranged.stdout.splitlines()[-1].startswith("done: windows 2/2 · rows 3 · "), ranged.stdout

"""A CLI that guides (issue 16): one-line errors with the fix and exit status 2, chatter in a log file,
--version, --json, --dry-run, --from/--to, `incsync state`, `incsync transfers` at 1,000 runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest

from incsync.cli.main import main
from incsync.cli.output import fix_separator
from incsync.cli.progress import Progress, progress_line
from incsync_tests.cli.test_cli import CSV, HAND_WRITTEN
from incsync_tests.support.lake import JAN1, lake_config, order, ts, write_table

EXE = str(Path(sys.executable).with_name("incsync"))


@pytest.fixture
def hand_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "exports" / "invoices").mkdir(parents=True)
    (tmp_path / "exports" / "invoices" / "invoices.csv").write_text(CSV)
    file = tmp_path / "incsync.yaml"
    file.write_text(HAND_WRITTEN)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return file


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, **(env or {})})


def test_version_and_a_mistyped_command_from_the_console_script(tmp_path: Path) -> None:
    version = _cli("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout.strip()) == (0, "incsync 0.1.0")
    typo = _cli("tranfser", "orders", cwd=tmp_path)  # no incsync.yaml here: the config must not be blamed
    assert (typo.returncode, typo.stdout, typo.stderr) == (
        2, "", 'error: "tranfser" is not an incsync command — did you mean "transfer"? (`incsync --help` lists them)\n'
    )


def test_usage_errors_are_one_line_with_the_fix(hand_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = ["-c", str(hand_config)]
    cases = [
        (["transfer", "invoices", "--window", "2024-13-01", *c],
         "error: --window 2024-13-01: not a window — model invoices has 6-hour windows keyed like 2024-01-01-00:00"),
        (["transfer", "invoices", "--window", "2024-01-01-07:00", *c],
         "error: --window 2024-01-01-07:00: not a window key — model invoices has 6-hour windows keyed like "
         "2024-01-01-00:00; the window holding 2024-01-01-07:00 is 2024-01-01-06:00"),
        (["transfer", "invoices", "--window", "2023-12-31", *c],
         "error: --window 2023-12-31: not a window key — model invoices has 6-hour windows keyed like 2024-01-01-00:00; "
         "the window holding 2023-12-31 is 2023-12-31-00:00"),
        (["transfer", "invoices", "--window", "2023-12-31-18:00", *c],
         "error: --window 2023-12-31-18:00: before the model's first window — model invoices has 6-hour windows keyed "
         "like 2024-01-01-00:00 (min_start_time_epoch)"),
        (["transfer", "invoices", "--from", "2024-02-01", "--to", "2024-01-01", *c],
         "error: --from 2024-02-01 is after --to 2024-01-01: swap them"),
        (["transfer", "invoices", "--from", "yesterday", *c],
         "error: --from yesterday: not a window — model invoices has 6-hour windows keyed like 2024-01-01-00:00"),
        (["transfer", "orders", *c], f'error: {hand_config}: unknown model "orders" — known: invoices'),
        (["transfer", "invoices", "--bogus", *c], "error: incsync: unrecognized arguments: --bogus — see `incsync --help`"),
        (["transfer", *c], "error: incsync transfer: the following arguments are required: model — see "
                           "`incsync transfer --help`"),
        (["validate", "-c", str(hand_config.with_name("missing.yaml"))],
         f"error: {hand_config.with_name('missing.yaml')}: file not found — create it or point INCSYNC_CONFIG at it"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", expected + "\n"), argv
    assert not (hand_config.parent / "dagster_home").exists()  # nothing was launched, no instance created


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(
    hand_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import incsync.config.load

    def broken(_path: object) -> None:
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(incsync.config.load, "load_config", broken)
    assert main(["validate", "-c", str(hand_config)]) == 1
    assert capsys.readouterr().err == "error: RuntimeError: disk on fire (rerun with --debug for the traceback)\n"
    with pytest.raises(RuntimeError, match="disk on fire"):
        main(["validate", "--debug", "-c", str(hand_config)])


def test_fix_separator_and_progress_lines() -> None:
    assert fix_separator('unknown model "a; b"; known: x; y') == 'unknown model "a; b" — known: x; y'
    assert fix_separator("no fix here") == "no fix here"
    assert progress_line(done=0, total=40, rows=0, elapsed=0.0) == "windows 0/40 · rows 0 · ETA ?"
    assert progress_line(done=10, total=40, rows=12_345, elapsed=5.0, recipients_done=1, recipients=4) == (
        "windows 10/40 · recipients 1/4 · rows 12,345 · 2,469 rows/s · ETA 15s"
    )
    assert progress_line(done=40, total=40, rows=100, elapsed=125.0) == "windows 40/40 · rows 100 · 1 rows/s · took 2m05s"
    bar = Progress(total=3, recipients={"a": 2, "b": 1}, enabled=False, started=100.0)
    for rid, window, rows in [("a", "w1", 5), ("a", "w1", 5), ("b", "w1", 7), ("a", "w2", 1)]:
        bar.committed(rid, window, rows)  # a window reported twice counts once
    assert bar.line(now=110.0) == "windows 3/3 · recipients 2/2 · rows 13 · 1 rows/s · took 10s"


def test_progress_holds_a_bit_a_window() -> None:
    """A first sync of many recipients reports every window: what the bar keeps must not be a pair a window."""
    import tracemalloc

    windows = [f"2025-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 29)]  # 336 windows
    bar = Progress(total=1_000 * len(windows), recipients={f"r{i}": len(windows) for i in range(1_000)}, enabled=False)
    tracemalloc.start()
    try:
        for i in range(1_000):
            for window in windows:
                bar.committed(f"r{i}", window, 0)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bar.done == 336_000 and bar.line(now=bar.started + 1).startswith("windows 336000/336000 · recipients 1000/1000")
    assert held < 1_000_000, f"{held:,} bytes for 336,000 windows"  # a set of pairs held ~40 MB


def _parquet_config(tmp_path: Path) -> Path:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 5)), order(3, "org_2", ts(1, 6)), order(4, "org_1", ts(2, 3)),
        order(5, "org_2", ts(3, 1)),
    ])
    return lake_config(tmp_path, recipients=[
        {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
        {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
    ])


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    file = _parquet_config(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert main(["transfer", "orders", "--from", "2024-01-01", "--to", "2024-01-02", "--dry-run", "-c", str(file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "dry run: transfer orders (backfill), 2 recipient(s), 1 run(s); nothing is written"
    assert [line.split() for line in out[2:]] == [
        ["acme", "acme_delta", "2", "2024-01-01", "..", "2024-01-02", "[2024-01-01T00:00:00,", "2024-01-03T00:00:00)",
         "first_window", "-", "3"],
        ["globex", "globex_delta", "2", "2024-01-01", "..", "2024-01-02", "[2024-01-01T00:00:00,", "2024-01-03T00:00:00)",
         "first_window", "-", "1"],
        ["total:", "4", "window(s),", "~4", "rows"],
    ]
    assert main(["transfer", "orders", "--recipient", "globex", "--window", "2024-01-03", "--dry-run", "--json",
                 "-c", str(file)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan == {"model": "orders", "mode": "manual", "dry_run": True, "runs": 1, "transfers": [{
        "recipient": "globex", "destination": "globex_delta", "windows": 1, "first_window": "2024-01-03",
        "last_window": "2024-01-03", "lower_bound": "2024-01-02T23:55:00+00:00", "upper_bound": "2024-01-04T00:00:00+00:00",
        "bounds_reason": "whole_window", "high_watermark": None, "full_refresh_reason": None, "estimated_rows": 1,
    }]}
    # A full refresh says so, whatever windows it covers (its lines' transfer type is FULL_REFRESH).
    assert main(["transfer", "orders", "--recipient", "acme", "--full-refresh", "--dry-run", "-c", str(file)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "dry run: transfer orders (full_refresh), 1 recipient(s), 1 run(s); nothing is written")
    assert main(["transfer", "orders", "--from", "2024-01-01", "--full-refresh", "--dry-run", "--json", "-c", str(file)]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "full_refresh"
    assert not (tmp_path / "out").exists()  # no destination written
    assert not (tmp_path / "home").exists()  # no Dagster instance, no run


def test_from_to_backfill_json_state_and_transfers(tmp_path: Path, monkeypatch, spark, capsys) -> None:
    file = _parquet_config(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    c = ["-c", str(file)]
    assert main(["transfer", "orders", "--from", "2024-01-01T12:00:00Z", "--to", "2024-01-02", "--json", *c]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["model"], report["mode"], report["ok"]) == ("orders", "backfill", True)
    [run] = report["runs"]
    assert [(t["recipient"], t["window"], t["rows_transferred"]) for t in run["transfers"]] == [
        ("acme", "2024-01-01", 2), ("acme", "2024-01-02", 1), ("globex", "2024-01-01", 1), ("globex", "2024-01-02", 0),
    ]
    instance = dg.DagsterInstance.get()
    assert {str(k) for k in instance.get_materialized_partitions(dg.AssetKey(["lake", "orders"]))} == {
        "acme|2024-01-01", "acme|2024-01-02", "globex|2024-01-01", "globex|2024-01-02",
    }

    assert main(["state", "orders", "--recipient", "acme", "--json", *c]) == 0
    [state] = json.loads(capsys.readouterr().out)
    assert state["high_watermark"] == "2024-01-02T03:00:00+00:00"
    assert state["last_transfer"]["transfer_type"] == "INCREMENTAL"
    assert (state["recipient"], state["destination"], state["fingerprint_matches"]) == ("acme", "acme_delta", True)
    assert main(["state", "orders", *c]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0][:4] == ["recipient", "destination", "high", "watermark"]
    assert [line[:4] for line in lines[1:]] == [
        ["acme", "acme_delta", "2024-01-02T03:00:00+00:00", "INCREMENTAL"],
        ["globex", "globex_delta", "2024-01-01T06:00:00+00:00", "INCREMENTAL"],
    ]
    assert lines[1][-1] == "(current)"

    assert main(["transfers", "--json", *c]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["status"], listed["mode"], listed["windows"], listed["rows_transferred"], listed["error"]) == (
        "SUCCESS", "backfill", 4, 4, None,
    )
    assert listed["duration_seconds"] > 0 and listed["recipients"] == ["acme", "globex"]

    assert main(["validate", "--json", *c]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["summary"], doc["problems"]) == (True, "1 sources, 2 destinations, 1 models, 2 recipients", [])

    assert main(["transfer", "orders", "--recipient", "acme", "--full-refresh", "--json", *c]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["mode"], report["ok"]) == ("full_refresh", True)
    [run] = report["runs"]
    assert {t["transfer_type"] for t in run["transfers"]} == {"FULL_REFRESH"}
    assert main(["transfers", "--json", *c]) == 0
    assert [t["mode"] for t in json.loads(capsys.readouterr().out)] == ["full_refresh", "backfill"]


def test_chatter_goes_to_a_log_file_named_on_failure(hand_config: Path, tmp_path: Path) -> None:
    """A real command line: BetaWarnings and Spark's banner stay off the terminal; a failure names the log."""
    (tmp_path / "exports" / "invoices" / "invoices.csv").write_text(CSV + "A-1,t-1,1.0,2024-01-01T02:00:00Z,dup\n")
    env = {"DAGSTER_HOME": str(tmp_path / "dagster_home"), "INCSYNC_LOG_DIR": str(tmp_path / "logs")}
    out = _cli("transfer", "invoices", "--window", "2024-01-01-00:00", "-c", str(hand_config), env=env)
    assert out.returncode == 1
    assert out.stdout.splitlines()[-1] == "invoices     acme         2024-01-01-00:00  FAILED"
    [log] = list((tmp_path / "logs").glob("incsync-transfer-*.log"))
    assert out.stderr.splitlines() == [
        "error: ValidationError: model invoices, recipient acme: 1 primary key value(s) (invoice_no) occur more than "
        "once in the batch: ('A-1'); nothing was published. Fix the source or choose a primary_key that is unique.",
        f"Dagster's and Spark's output: {log}",
    ]
    text = log.read_text()
    assert "BetaWarning" in text and "Setting default log level" in text  # what used to drown the terminal


@pytest.mark.slow  # a timing check (~17 s to build the runs) that a loaded 2-core machine can fail: make test-long
def test_transfers_lists_1000_runs_within_2_seconds(tmp_path: Path, monkeypatch, capsys) -> None:
    """1,000 runs with their materializations in a PostgreSQL-backed instance (what production uses)."""
    import yaml
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.dagster_run import DagsterRun

    from incsync_tests.support.jdbc import HOST, PG_PORT, pg_database

    file = lake_config(tmp_path)
    key = dg.AssetKey(["lake", "orders"])
    with pg_database() as db:
        home = tmp_path / "home"
        home.mkdir()
        url = f"postgresql+psycopg2://{db.user}@{HOST}:{PG_PORT}/{db.name}"
        (home / "dagster.yaml").write_text(yaml.safe_dump({
            "storage": {"postgres": {"postgres_url": url}}, "telemetry": {"enabled": False},
        }))
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        instance = dg.DagsterInstance.get()
        try:
            entries, runs = [], []
            for i in range(1000):
                run_id = str(uuid.uuid4())
                failed = i % 100 == 99
                runs.append(DagsterRun(
                    job_name="orders", run_id=run_id, asset_selection=frozenset({key}),
                    status=dg.DagsterRunStatus.FAILURE if failed else dg.DagsterRunStatus.SUCCESS,
                    tags={"incsync/recipient": "acme", "incsync/model": "orders", "incsync/mode": "incremental",
                          **({"incsync/error": f"SourceError: failure {i}"} if failed else {})},
                ))
                if not failed:
                    mat = dg.AssetMaterialization(asset_key=key, partition="acme|2024-01-01",
                                                  metadata={"rows_transferred": 5, "delta_rows_transferred": 2})
                    entries.append(EventLogEntry(
                        error_info=None, level="debug", user_message="", run_id=run_id, timestamp=time.time(),
                        dagster_event=DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, job_name="orders",
                                                   event_specific_data=StepMaterializationData(mat)),
                    ))
            with ThreadPoolExecutor(max_workers=8) as pool:  # creation order is the listing's order
                for chunk in range(0, 1000, 100):
                    list(pool.map(instance.add_run, runs[chunk:chunk + 100]))
            instance.event_log_storage.store_event_batch(entries)
            started = time.perf_counter()
            assert main(["transfers", "--limit", "1000", "-c", str(file)]) == 0
            took = time.perf_counter() - started
        finally:
            instance.dispose()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 1000 + 10 + 10 + 1  # header, runs, the failed runs' errors and blame, the counts
    assert lines[-1] == "orders: ERROR 10, SUCCESS 990"
    runs_lines = [line.split() for line in lines[1:-1] if not line.startswith(("    error:", "    blamed "))]
    assert sorted({tuple(r[2:10]) for r in runs_lines}) == [
        ("ERROR", "unknown", "incremental", "orders", "acme", "0", "0", "0"),  # runs without incsync's blame tags
        ("SUCCESS", "-", "incremental", "orders", "acme", "1", "5", "2"),
    ]
    blamed = [line for line in lines if line.startswith("    blamed ")]
    assert blamed == ["    blamed unknown: the run failed before incsync saw an error: read the run's events in Dagster"] * 10
    errors = [(lines[i - 1].split()[2], line) for i, line in enumerate(lines) if line.startswith("    error:")]
    assert sorted(errors) == sorted(("ERROR", f"    error: SourceError: failure {i}") for i in range(99, 1000, 100))
    print(f"incsync transfers: 1,000 runs listed in {took:.2f} s")
    assert took <= 2.0, f"incsync transfers took {took:.2f} s for 1,000 runs"


def test_json_timestamps_are_iso() -> None:
    from incsync.cli.output import to_json

    assert to_json({"at": datetime(2024, 1, 1, tzinfo=timezone.utc), "p": Path("/x")}) == (
        '{"at": "2024-01-01T00:00:00+00:00", "p": "/x"}'
    )
    assert JAN1.year == 2024

"""`incsync validate` and `incsync transfer` on a configuration written by hand (CSV lake source)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from incsync.cli.main import main
from incsync.operations.partitions import partition_key
from incsync_tests.support.lake import delta_rows, ts

HAND_WRITTEN = """
sources:
  - name: shop
    vendor: lake
    path: ./exports
    format: csv
destinations:
  - {name: acme_lake, kind: delta, path: ./customers/acme}
models:
  - model_name: invoices
    source: shop
    source_table: invoices
    columns: [invoice_no, tenant, total, modified]
    primary_key: [invoice_no]
    last_modified_column: modified
    organization_column: tenant
    max_transfer_time_window_seconds: 21600
    min_start_time_epoch: 1704067200
    frequency: "0 * * * *"
recipients:
  - id: acme
    id_in_provider_system: "t-1"
    destination: acme_lake
    tags: {tier: gold}
"""

CSV = """invoice_no,tenant,total,modified,internal_note
A-1,t-1,10.5,2024-01-01T01:00:00.000001Z,x
A-2,t-1,20.0,2024-01-01T07:30:00Z,x
B-1,t-2,99.0,2024-01-01T02:00:00Z,secret
A-3,t-1,5.25,2024-01-01T13:00:00Z,x
"""


@pytest.fixture
def hand_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "exports" / "invoices").mkdir(parents=True)
    (tmp_path / "exports" / "invoices" / "invoices.csv").write_text(CSV)
    file = tmp_path / "incsync.yaml"
    file.write_text(HAND_WRITTEN)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return file


def test_validate_console_script(hand_config: Path, tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("incsync")
    ok = subprocess.run([str(exe), "validate", "-c", str(hand_config)], capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout.strip()) == (0, f"{hand_config}: OK (1 sources, 1 destinations, 1 models, 1 recipients)")
    bad = tmp_path / "bad.yaml"
    bad.write_text(HAND_WRITTEN.replace("primary_key: [invoice_no]", "primary_key: [invoice]"))
    out = subprocess.run([str(exe), "validate", "-c", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f'error: {bad}:14: models[0].primary_key: column "invoice" is not in columns [invoice_no, tenant, total, modified] '
        "— fix its spelling or add it to columns",
    ]


def test_transfer_backfill_then_window(hand_config: Path, tmp_path: Path, spark, capsys: pytest.CaptureFixture[str]) -> None:
    # Backfill up to "now": 6-hour windows from 2024-01-01; only the first two hold rows.
    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01-00:00", "-c", str(hand_config)]) == 0
    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01-06:00", "-c", str(hand_config)]) == 0
    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01-12:00", "-c", str(hand_config),
                 "--tag", "ticket=INC-42"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [line.split() for line in out if line.startswith("invoices")]
    assert [(line[2], line[3], line[4]) for line in lines] == [
        ("2024-01-01-00:00", "rows_transferred=1", "delta_rows_transferred=1"),
        ("2024-01-01-06:00", "rows_transferred=1", "delta_rows_transferred=1"),
        ("2024-01-01-12:00", "rows_transferred=1", "delta_rows_transferred=1"),
    ]
    assert lines[0][5] == "high_watermark=2024-01-01T01:00:00.000001+00:00"
    rows = delta_rows(tmp_path / "customers" / "acme" / "invoices", sort="invoice_no")
    assert [(r["invoice_no"], r["tenant"], r["total"], r["modified"]) for r in rows] == [
        ("A-1", "t-1", 10.5, ts(1, 1, 0, 0, 1)),
        ("A-2", "t-1", 20.0, ts(1, 7, 30)),
        ("A-3", "t-1", 5.25, ts(1, 13)),
    ]
    assert set(rows[0]) == {"invoice_no", "tenant", "total", "modified"}, "only the model's columns travel"
    instance = dg.DagsterInstance.get()
    runs = instance.get_runs()
    assert runs[0].tags["incsync/tag/ticket"] == "INC-42"
    assert runs[0].tags["incsync/model_destination"] == "invoices@acme_lake"
    materialized = instance.get_materialized_partitions(dg.AssetKey(["shop", "invoices"]))
    assert {str(k) for k in materialized} == {"acme|2024-01-01-00:00", "acme|2024-01-01-06:00", "acme|2024-01-01-12:00"}


def test_bad_tag_and_unknown_recipient(hand_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01-00:00",
                 "-c", str(hand_config), "--tag", "ticket=INC 42"]) == 2
    assert main(["transfer", "invoices", "--recipient", "umbrella", "-c", str(hand_config)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        'error: tag ticket=INC 42: value "INC 42" is invalid; tag keys and values must match ^[A-Za-z0-9_-]+$ '
        "(letters, digits, _ and - only)",
        f'error: {hand_config}: unknown recipient "umbrella" — known: acme',
    ]


def test_failed_transfer_exits_non_zero_with_the_reason_and_transfers_lists_it(
    hand_config: Path, tmp_path: Path, spark, capsys
) -> None:
    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01-00:00", "-c", str(hand_config),
                 "--tag", "ticket=INC-1"]) == 0
    (tmp_path / "exports" / "invoices" / "invoices.csv").write_text(CSV + "A-1,t-1,1.0,2024-01-01T02:00:00Z,dup\n")
    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01-00:00", "-c", str(hand_config)]) == 1
    captured = capsys.readouterr()
    assert "invoices     acme         2024-01-01-00:00  FAILED" in captured.out
    error, log_line = captured.err.strip().splitlines()
    assert error == (
        "error: ValidationError: model invoices, recipient acme: 1 primary key value(s) (invoice_no) occur more than "
        "once in the batch: ('A-1'); nothing was published. Fix the source or choose a primary_key that is unique."
    )
    assert log_line.startswith(f"Dagster's and Spark's output: {tmp_path / 'dagster_home' / 'logs'}/incsync-transfer-")
    assert main(["transfers", "-c", str(hand_config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["created", "(UTC)", "status", "blamed", "mode", "model(s)", "recipient(s)", "windows",
                                "rows", "delta", "duration", "owner(s)", "run", "tags"]
    rows = [line.split() for line in lines[1:]]
    assert [r[2:10] for r in (rows[0], rows[3])] == [
        ["ERROR", "provider", "manual", "invoices", "acme", "0", "0", "0"],
        ["SUCCESS", "-", "manual", "invoices", "acme", "1", "1", "1"],
    ]
    assert lines[2:4] == [  # the failed run's error, first line, under it, and whose it is to fix
        "    error: ValidationError: model invoices, recipient acme: 1 primary key value(s) (invoice_no) occur more "
        "than once in the batch: ('A-1'); nothing was published. Fix the source or choose a primary_key that is unique.",
        "    blamed provider: source rows break the model's contract (NULL or duplicate primary key, NULL "
        "last-modified): fix the rows at the source or the model's primary_key",
    ]
    assert rows[0][10].endswith("s") and float(rows[0][10].rstrip("s")) > 0  # duration
    assert (rows[0][11], rows[3][11]) == ("-", "acme")  # the failed run wrote nowhere; the other's table is acme's
    assert rows[3][13] == "ticket=INC-1,tier=gold"  # the recipient's tags travel with its runs
    assert rows[4] == ["invoices:", "ERROR", "1,", "SUCCESS", "1"]
    assert main(["transfers", "-c", str(hand_config), "--tag", "ticket=INC-1", "--status", "success"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # header, one transfer, the per-model counts
    assert main(["transfers", "-c", str(hand_config), "--status", "DONE"]) == 2
    assert capsys.readouterr().err.strip() == (
        'error: unknown transfer status "DONE"; use one of PENDING, RUNNING, SUCCESS, ERROR, PARTIAL_FAILURE, '
        "CANCELLED, KILLED, EXPIRED, ORPHANED"
    )
    assert main(["transfers", "-c", str(hand_config), "--blamed", "recipient"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # the header: no failure is the recipient's
    assert main(["transfers", "-c", str(hand_config), "--blamed", "provider", "--json"]) == 0
    [failed] = json.loads(capsys.readouterr().out)
    assert (failed["status"], failed["blamed"]) == ("ERROR", "provider")
    assert failed["blame_reason"].startswith("source rows break the model's contract")


def test_backfill_runs_every_window_in_one_run_with_exact_metadata(tmp_path: Path, monkeypatch, spark, capsys) -> None:
    """A backfill is one range run (one Spark session); each window still gets its own counts."""
    from datetime import datetime, timedelta, timezone

    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=2)
    (tmp_path / "exports" / "invoices").mkdir(parents=True)
    rows = [("A-1", start + timedelta(hours=1)), ("A-2", start + timedelta(hours=2)), ("A-3", start + timedelta(days=1, hours=3))]
    (tmp_path / "exports" / "invoices" / "part.csv").write_text(
        "invoice_no,tenant,total,modified\n" + "".join(f"{no},t-1,1.0,{at.isoformat()}\n" for no, at in rows)
    )
    file = tmp_path / "incsync.yaml"
    file.write_text(
        HAND_WRITTEN.replace("max_transfer_time_window_seconds: 21600", "max_transfer_time_window_seconds: 86400")
        .replace("min_start_time_epoch: 1704067200", f"min_start_time_epoch: {int(start.timestamp())}")
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["transfer", "invoices", "--recipient", "acme", "--backfill", "-c", str(file)]) == 0
    days = [(start + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(3)]
    instance = dg.DagsterInstance.get()
    assert len(instance.get_runs()) == 1
    counts = {}
    for day in days:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["shop", "invoices"]), asset_partitions=[str(partition_key(day, "acme"))]),
            limit=1,
        ).records
        md = records[0].asset_materialization.metadata
        counts[day] = (md["rows_transferred"].value, md["delta_rows_transferred"].value)
    assert counts == {days[0]: (2, 2), days[1]: (1, 1), days[2]: (0, 0)}
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("invoices")]
    hw = (start + timedelta(days=1, hours=3)).isoformat()
    assert out == [  # one line for the recipient: its windows' totals and newest high watermark (issue 29)
        f"invoices     acme         {days[0]} .. {days[2]} (3 windows) rows_transferred=3 delta_rows_transferred=3 "
        f"high_watermark={hw} INCREMENTAL"
    ]
    assert main(["transfer", "invoices", "--recipient", "acme", "--backfill", "--verbose", "-c", str(file)]) == 0
    verbose = [line.split()[2:5] for line in capsys.readouterr().out.splitlines() if line.startswith("invoices")]
    # A line per window; the backfill read them again, so nothing in them is newer than the HW.
    assert verbose == [[days[0], "rows_transferred=2", "delta_rows_transferred=0"],
                       [days[1], "rows_transferred=1", "delta_rows_transferred=0"],
                       [days[2], "rows_transferred=0", "delta_rows_transferred=0"]]


def test_dagster_yaml_limits_come_from_the_config(hand_config: Path, tmp_path: Path, capsys) -> None:
    import yaml

    repo_yaml = Path(__file__).resolve().parents[2] / "dagster.yaml"
    assert main(["dagster-yaml", "-c", str(hand_config), "--base", str(repo_yaml), "-o", str(tmp_path / "d.yaml")]) == 0
    doc = yaml.safe_load((tmp_path / "d.yaml").read_text())
    assert doc["telemetry"] == {"enabled": False}
    assert doc["event_log_storage"] == {  # the instance beside the file gets the batching event log
        "module": "incsync.operations.dagster_compat", "class": "BatchingSqliteEventLogStorage",
        "config": {"base_dir": f"{tmp_path}/history/runs/"},
    }
    assert doc["concurrency"]["runs"]["tag_concurrency_limits"] == [
        {"key": "incsync/model_destination", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
        {"key": "incsync/shard", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
        {"key": "incsync/source-slots-10", "value": {"applyLimitPerUniqueValue": True}, "limit": 10},
        {"key": "incsync/destination-slots-1", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
    ]
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides={"concurrency": doc["concurrency"]}) as instance:
        assert instance.get_concurrency_config().run_queue_config.tag_concurrency_limits[2]["limit"] == 10

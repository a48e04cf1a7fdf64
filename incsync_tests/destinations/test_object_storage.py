"""Object storage: manifest contents, finding the newest manifest, the reader, the janitor, disable_manifest."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import incsync
from incsync.errors import LeaseError
from incsync.staging.spark import stage
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target
from incsync_tests.support.lake import lake_config, order, ts, write_table

ROWS = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)), order(4, "org_1", ts(2, 6))]
PREQUEL_KEYS = {
    "version", "transfer_id", "start_time", "end_time", "model_id", "model_name", "bucket_name", "bucket_prefix",
    "manifest_file_key", "file_format", "transfer_type", "files",
}
OUR_KEYS = {
    "recipient", "window_start", "window_end", "lower_bound", "upper_bound", "rows_transferred",
    "delta_rows_transferred", "high_watermark", "schema",
}


def _config(root: Path, **destination: object) -> Path:
    write_table(root / "src", "orders", ROWS)
    return lake_config(
        root,
        recipients=[
            {"id": "acme", "id_in_provider_system": "org_1", "destination": "files"},
            {"id": "globex", "id_in_provider_system": "org_2", "destination": "files"},
        ],
        destinations=[{"name": "files", "kind": "object_storage", "path": "./out/files", **destination}],
        model={"lookback_seconds": 0},
    )


def _manifests(root: Path) -> list[Path]:
    return sorted(root.glob("_manifests/orders/dt=*/manifest_*.json"))


def test_manifest_is_written_last_with_prequel_and_incsync_keys(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    outcome = run(config, "2024-01-01", scheduled=False)
    record = outcome.record
    date = record.committed_at[:10]

    [path] = _manifests(out)
    assert path == out / "_manifests" / "orders" / f"dt={date}" / f"manifest_{record.transfer_id}.json"
    manifest = json.loads(path.read_text())
    assert PREQUEL_KEYS | OUR_KEYS <= manifest.keys()
    assert (manifest["transfer_id"], manifest["transfer_type"], manifest["file_format"]) == (record.transfer_id, "INCREMENTAL", "PARQUET")
    assert manifest["manifest_file_key"] == str(path.relative_to(out))
    assert (manifest["recipient"], manifest["rows_transferred"], manifest["delta_rows_transferred"]) == ("acme", 2, 2)
    assert manifest["high_watermark"] == ts(1, 2).isoformat()
    assert (manifest["window_start"], manifest["lower_bound"]) == (ts(1).isoformat(), ts(1).isoformat())
    assert [c["name"] for c in manifest["schema"]] == ["id", "organization_id", "status", "amount", "updated_at"]
    [entry] = manifest["files"]
    data = out / entry["data_file_key"]
    assert data.parent == out / "orders" / "recipient=acme" / f"dt={date}"
    assert entry["sha256_checksum"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert entry["row_count"] == pq.read_metadata(data).num_rows == 2
    assert os.path.getmtime(path) >= os.path.getmtime(data)
    assert not list(out.rglob("*.tmp"))


def test_recipients_sharing_a_prefix_read_their_own_rows_and_state(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    for window in ("2024-01-01", "2024-01-02"):
        run(config, window, scheduled=False, recipient_id="acme")
    run(config, "2024-01-01", scheduled=False, recipient_id="globex")
    acme = incsync.read_manifested(out, "orders", "acme").sort_by("id").to_pylist()
    assert acme == [r for r in ROWS if r["organization_id"] == "org_1"]
    assert incsync.read_manifested(out, "orders", "globex").to_pylist() == [ROWS[2]]
    assert Target(config, recipient="acme").high_watermark() == ts(2, 6)
    assert Target(config, recipient="globex").high_watermark() == ts(1, 3)


def test_newest_manifest_is_found_without_or_behind_the_pointer(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    first = run(config, "2024-01-01", scheduled=False).record
    pointer = out / "_manifests" / "orders" / "_latest" / "recipient=acme.json"
    behind = pointer.read_text()
    time.sleep(1.1)  # transfer ids are second-stamped
    second = run(config, "2024-01-02", scheduled=False).record
    target = Target(config)
    assert target.state().last_transfer.transfer_id == second.transfer_id

    pointer.write_text(behind)  # as if the process died between the manifest and the pointer
    assert target.state().last_transfer.transfer_id == second.transfer_id
    assert target.state().version == "2"
    pointer.unlink()
    assert target.state().last_transfer.transfer_id == second.transfer_id
    assert first.transfer_id != second.transfer_id


def test_a_stale_writer_is_refused_and_writes_no_manifest(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    target = Target(config)
    stale = target.state()
    outcome = run(config, "2024-01-01", scheduled=False)
    batch = stage(incsync.read_manifested(out, "orders", "acme"), tmp_path / "staging" / "late")
    record = dataclasses.replace(outcome.record, transfer_id="20240101T000000Z-000000000000")
    with pytest.raises(LeaseError, match=rf"model orders, recipient acme: transfer {outcome.record.transfer_id} committed to .* after this transfer read None; nothing was published"):
        target.destination.publish(model=target.model, recipient=target.recipient, batch=batch, record=record, expected=stale)
    assert len(_manifests(out)) == 1


def test_full_refresh_manifest_supersedes_earlier_ones(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    run(config, "2024-01-01", scheduled=False)
    run(config, "2024-01-02", scheduled=False)
    write_table(tmp_path / "src", "orders", [r for r in ROWS if r["id"] != 1])
    run(config, "2024-01-02", scheduled=False, full_refresh=True)
    assert len(_manifests(out)) == 3
    assert incsync.read_manifested(out, "orders", "acme").sort_by("id").to_pylist() == [ROWS[1], ROWS[3]]


def test_janitor_removes_only_old_unmanifested_files(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    run(config, "2024-01-01", scheduled=False)
    committed = sorted(out.glob("orders/recipient=acme/dt=*/*.parquet"))
    folder = committed[0].parent
    old_orphan, new_orphan = folder / "orphan-old.parquet", folder / "orphan-new.parquet"
    for orphan in (old_orphan, new_orphan):
        orphan.write_bytes(committed[0].read_bytes())
    hour_ago = time.time() - 7200
    os.utime(old_orphan, (hour_ago, hour_ago))
    os.utime(committed[0], (hour_ago, hour_ago))
    before = incsync.read_manifested(out, "orders", "acme")

    assert incsync.janitor(out, grace_seconds=3600, dry_run=True) == [old_orphan]
    assert old_orphan.exists()
    assert incsync.janitor(out, grace_seconds=3600) == [old_orphan]
    assert not old_orphan.exists() and new_orphan.exists() and committed[0].exists()
    assert incsync.read_manifested(out, "orders", "acme") == before


def test_disable_manifest_still_keeps_the_transfer_log(tmp_path: Path) -> None:
    config = _config(tmp_path, disable_manifest=True)
    out = tmp_path / "out" / "files"
    run(config, "2024-01-01", scheduled=False)
    second = run(config, "2024-01-02", scheduled=False)
    assert not (out / "_manifests").exists()
    assert len(list(out.glob("_incsync/transfers/orders/dt=*/transfer_*.json"))) == 2
    target = Target(config)
    assert target.state().last_transfer.transfer_id == second.record.transfer_id
    assert target.high_watermark() == ts(2, 6)
    assert target.rows() == [r for r in ROWS if r["organization_id"] == "org_1"]
    assert incsync.janitor(out, grace_seconds=0) == []


def test_janitor_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from incsync.cli.main import main

    config = _config(tmp_path)
    out = tmp_path / "out" / "files"
    run(config, "2024-01-01", scheduled=False)
    orphan = out / "orders" / "recipient=acme" / "dt=2024-01-01" / "orphan.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"PAR1")
    os.utime(orphan, (time.time() - 100, time.time() - 100))

    assert main(["janitor", "-c", str(config), "--grace-seconds", "50", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"would remove {orphan}", "files: would remove 1 unmanifested file(s) older than 50 s"]
    assert main(["janitor", "-c", str(config), "--grace-seconds", "50"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "files: removed 1 unmanifested file(s) older than 50 s"
    assert not orphan.exists()
    assert main(["janitor", "-c", str(config), "--destination", "nope"]) == 2
    assert '--destination: "nope" is not an object_storage destination — known: [files]' in capsys.readouterr().err


"""`incsync maintain` on an object-storage destination (issue 33): a snapshot manifest of each recipient's live
rows that readers start from, transfers continuing after it, vacuum past the retention bounding the folder, no
reader inside the retention failing, and no maintenance while a transfer holds the destination."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import incsync
from incsync.cli.main import run_command
from incsync.config.load import load_config
from incsync.destinations.object_storage.manifests import committed_manifests
from incsync.destinations.object_storage.reader import read_manifests
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target
from incsync_tests.support.lake import lake_config, order, ts, write_table

BASE = 200  # orders of the backfill
INCREMENTALS = 100


def _config(root: Path, **destination: object) -> Path:
    spec = {"name": "files", "kind": "object_storage", "path": "./out/files", **destination}
    return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "files"}],
                       destinations=[spec], model={"lookback_seconds": 0})


def _at(minute: int):
    return ts(1, 8 + minute // 60, minute % 60)


def _source(k: int) -> list[dict]:
    """BASE orders, then the n-th incremental (n = 1..k) adds order BASE + n and updates order n, both at minute n."""
    return [*(order(i, "org_1", _at(i), status="changed") if i <= k else order(i, "org_1", ts(1, 1)) for i in range(1, BASE + 1)),
            *(order(BASE + n, "org_1", _at(n)) for n in range(1, k + 1)), order(9000, "org_2", ts(1, 2))]


def _expected(k: int) -> list[dict]:
    return sorted((r for r in _source(k) if r["organization_id"] == "org_1"), key=lambda r: r["id"])


def _maintain(config: Path, **kwargs: object):
    target = Target(config)
    return target.destination.maintain([target.model], compact=True, dry_run=False, **kwargs)


def _data_files(out: Path) -> list[Path]:
    return sorted((out / "orders" / "recipient=acme").rglob("*.parquet"))


def _manifests(out: Path) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in out.glob("_manifests/orders/dt=*/manifest_*.json")),
                  key=lambda m: m["sequence"])


@pytest.fixture
def synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A backfill and 100 tiny incrementals (one new and one updated order each), without Spark."""
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    config = _config(tmp_path)
    write_table(tmp_path / "src", "orders", _source(0))
    arrow_transfer.run(config, "2024-01-01", scheduled=False)
    for k in range(1, INCREMENTALS + 1):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=True)
    return tmp_path, config


def test_snapshot_keeps_every_reader_exact_and_vacuum_past_the_retention_bounds_the_folder(synced, capsys) -> None:
    root, config = synced
    out = root / "out" / "files"
    target = Target(config)
    state = target.state()
    assert target.rows() == _expected(INCREMENTALS) and state.version == str(INCREMENTALS + 1)
    raw_before = target.raw_rows()
    logged = sum(f["row_count"] for m in _manifests(out) for f in m["files"])
    files = len(_data_files(out))
    assert len(raw_before) == logged > BASE + 2 * INCREMENTALS  # the append log: rows once per transfer that read them
    assert files == INCREMENTALS + 1
    versions = {v: incsync.read_manifested(out, "orders", "acme", version=v) for v in (1, 2, 50, INCREMENTALS + 1)}
    held = committed_manifests(out, "orders", "acme")  # a reader that listed the manifests before maintenance
    stored_before = sum(p.stat().st_size for p in _data_files(out))

    assert run_command(["maintain", "--dry-run", "-c", str(config)]) == 0
    dry = capsys.readouterr().out
    assert f"files {out / 'orders' / 'recipient=acme'}: {INCREMENTALS + 1} file(s) to compact, 0 file(s) to vacuum" in dry, dry
    assert len(_manifests(out)) == INCREMENTALS + 1  # a dry run writes and deletes nothing

    # Retention 7 days (the default): the snapshot is committed; nothing is old enough to vacuum.
    assert run_command(["maintain", "-c", str(config)]) == 0
    line = capsys.readouterr().out
    assert f"files {INCREMENTALS + 1} -> {INCREMENTALS + 2} ({INCREMENTALS + 1} compacted), 0 vacuumed" in line, line
    manifests = _manifests(out)
    snapshot = manifests[-1]
    assert len(manifests) == INCREMENTALS + 2
    assert (snapshot["transfer_type"], snapshot["sequence"]) == ("FULL_REFRESH", INCREMENTALS + 2)
    assert snapshot["snapshot"] == {"of_sequence": INCREMENTALS + 1, "from_sequence": 1, "manifests": INCREMENTALS + 1,
                                    "files_compacted": INCREMENTALS + 1, "rows_read": logged}
    assert snapshot["transfer_record"] == manifests[-2]["transfer_record"]
    assert snapshot["rows_transferred"] == sum(f["row_count"] for f in snapshot["files"]) == BASE + INCREMENTALS
    assert target.state().last_transfer == state.last_transfer  # the state, HW and ownership read the same
    assert target.state().version == str(INCREMENTALS + 2) and target.state().reset_reason is None
    assert target.rows() == _expected(INCREMENTALS)
    assert target.raw_rows() == _expected(INCREMENTALS)  # readers start from the snapshot: each key once
    # Every reader inside the retention still reads: each older version, and the list held since before.
    for v, table in versions.items():
        assert incsync.read_manifested(out, "orders", "acme", version=v) == table
    assert sorted(read_manifests(target.destination.store, held).to_pylist(), key=lambda r: (r["id"], str(r["updated_at"]))) == raw_before

    # Past the retention (0 hours): only the snapshot is left, and the folder holds its live data.
    doc = yaml.safe_load(config.read_text())
    doc["destinations"][0]["retention_hours"] = 0
    config.write_text(yaml.safe_dump(doc))
    assert run_command(["maintain", "-c", str(config)]) == 0
    line = capsys.readouterr().out
    assert f"files {INCREMENTALS + 2} -> 1 (0 compacted), {INCREMENTALS + 1} vacuumed" in line, line
    [maintained] = _maintain(config)  # nothing new since the snapshot: nothing to do
    assert (maintained.files_compacted, maintained.files_vacuumed, maintained.files_after) == (0, 0, 1)
    [data] = _data_files(out)
    assert [m["sequence"] for m in _manifests(out)] == [INCREMENTALS + 2]
    stored = sum(p.stat().st_size for p in _data_files(out))
    assert stored == maintained.bytes_live == maintained.bytes_stored_after <= 1.5 * maintained.bytes_live
    assert stored < stored_before / 10, (stored, stored_before)
    assert Target(config).rows() == _expected(INCREMENTALS)
    with pytest.raises(FileNotFoundError):  # a reader that held its list longer than the retention
        read_manifests(target.destination.store, held)


def test_transfers_continue_after_a_snapshot_and_a_reader_inside_the_retention_never_fails(synced) -> None:
    root, config = synced
    out = root / "out" / "files"
    target = Target(config)
    start = datetime.now(timezone.utc)
    _maintain(config, now=start)
    held = committed_manifests(out, "orders", "acme")  # starts at the snapshot
    assert held[0]["snapshot"]["of_sequence"] == INCREMENTALS + 1 and len(held) == 1

    # An incremental after it: one new order, an update of one the snapshot holds (upsert), sequence continues.
    source = _source(INCREMENTALS)
    source[BASE - 1] = order(BASE, "org_1", _at(150), status="late")
    source.append(order(BASE + INCREMENTALS + 1, "org_1", _at(151)))
    write_table(root / "src", "orders", source)
    after = arrow_transfer.run(config, "2024-01-01", scheduled=True)
    assert after.record.rows_transferred == 4 and target.state().last_transfer == after.record  # 2 new, 2 at the HW again
    assert _manifests(out)[-1]["sequence"] == INCREMENTALS + 3 and _manifests(out)[-1]["transfer_id"] == after.record.transfer_id
    expected = sorted((r for r in source if r["organization_id"] == "org_1"), key=lambda r: r["id"])
    assert target.rows() == expected

    # A second snapshot 100 h later (inside the 168 h retention): the first and its predecessors stay readable.
    _maintain(config, now=start + timedelta(hours=100))
    assert read_manifests(target.destination.store, held).num_rows == BASE + INCREMENTALS
    assert incsync.read_manifested(out, "orders", "acme", version=1).num_rows == BASE
    assert target.rows() == expected and target.raw_rows() == expected
    # 169 h after the first snapshot: what it superseded is gone; what the second superseded (100 h ago) stays.
    [done] = _maintain(config, now=start + timedelta(hours=169))
    assert done.files_vacuumed == INCREMENTALS + 1 and done.files_compacted == 0
    assert [m["sequence"] for m in _manifests(out)] == [INCREMENTALS + 2, INCREMENTALS + 3, INCREMENTALS + 4]
    assert read_manifests(target.destination.store, held).num_rows == BASE + INCREMENTALS
    assert target.rows() == expected
    [done] = _maintain(config, now=start + timedelta(hours=269))
    assert [m["sequence"] for m in _manifests(out)] == [INCREMENTALS + 4] and done.files_after == 1
    assert target.rows() == expected and target.state().last_transfer == after.record


def test_a_changed_file_is_never_compacted_and_a_signed_snapshot_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    from incsync.destinations.object_storage.signing import public_key_text

    key = Ed25519PrivateKey.generate()
    (tmp_path / "key.pem").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    monkeypatch.setenv("SIGNING_KEY", str(tmp_path / "key.pem"))
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    config = _config(tmp_path, signing_key_env="SIGNING_KEY")
    out = tmp_path / "out" / "files"
    for k in range(3):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=k > 0)
    first = _data_files(out)[0]
    original = first.read_bytes()
    pq.write_table(pq.read_table(first).slice(1), first)  # a careless hand drops a row after publishing
    [skipped] = _maintain(config)
    assert skipped.skipped is not None and "its signature" not in skipped.skipped
    assert f"data file {first.relative_to(out)} of manifest" in skipped.skipped and "changed after publishing" in skipped.skipped
    assert len(_manifests(out)) == 3  # nothing committed

    first.write_bytes(original)
    [done] = _maintain(config)
    assert done.skipped is None and done.files_compacted == 3
    public = public_key_text(key)
    assert incsync.read_manifested(out, "orders", "acme", public_key=public).sort_by("id").to_pylist() == _expected(2)
    assert _manifests(out)[-1]["signature_public_key"] == public


def test_maintenance_waits_for_the_transfer_that_holds_the_destination(tmp_path: Path, dagster_instance,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.operations.maintenance import maintain_destinations
    from incsync.operations.slots import FileSlots

    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    config = _config(tmp_path)
    for k in range(3):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=k > 0)
    slots = FileSlots(Path(dagster_instance.root_directory) / "incsync-slots")
    held = slots.try_take("destination:files", 0, "incsync run 1234abcd (a transfer)")
    assert held is not None
    said: list[str] = []
    started = time.monotonic()
    threading.Timer(1.5, slots.release, [held]).start()
    done = list(maintain_destinations(load_config(config), instance=dagster_instance, notify=said.append))
    assert time.monotonic() - started >= 1.5
    assert said == ["waiting: destination files (max_concurrent_transfers 1) is taken by incsync run 1234abcd (a transfer); "
                    "maintenance starts when it is free"]
    assert [(m.table, m.files_compacted) for m in done] == [(str(tmp_path / "out" / "files" / "orders" / "recipient=acme"), 3)]
    assert len(_manifests(tmp_path / "out" / "files")) == 4  # written only once the transfer's slot was free


def test_verify_and_repair_agree_after_maintenance_and_deletes_continue(spark, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.integrity.verify import verify_recipient
    from incsync.transfer.repair import repair_recipient
    from incsync_tests.faults.support import transfer

    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    config = _config(tmp_path)
    for k in range(4):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=k > 0)
    doc = yaml.safe_load(config.read_text())
    doc["models"][0]["deletes"] = "hard"
    doc["destinations"][0]["retention_hours"] = 0
    config.write_text(yaml.safe_dump(doc))
    cfg = load_config(config)
    model, recipient = cfg.model("orders"), cfg.recipient("acme")

    def verify():
        return verify_recipient(cfg, model, recipient, spark=lambda: spark, staging_root=tmp_path / "verify")

    [done] = _maintain(config)
    assert done.files_vacuumed == 4 and done.files_after == 1
    clean = verify()
    assert clean.passed and clean.counts["total_rows_compared"] == BASE + 3 and clean.counts["total_rows_orphaned"] == 0, clean.line()
    nothing = repair_recipient(cfg, model, recipient, spark=lambda: spark, staging_root=tmp_path / "repair")
    assert nothing.line() == "orders acme: nothing to repair"

    write_table(tmp_path / "src", "orders", [r for r in _source(3) if r["id"] not in (5, BASE + 2)])  # deleted at the source
    outcome = transfer(config, "2024-01-01", spark, staging_root=tmp_path / "staging")
    assert (outcome.record.extra["rows_removed"], outcome.record.extra["removal_mode"]) == ("2", "hard")
    target = Target(config)
    assert [r["id"] for r in target.rows()] == [r["id"] for r in _expected(3) if r["id"] not in (5, BASE + 2)]
    assert verify().passed
    [again] = _maintain(config)  # a new snapshot applies the delete file; vacuum takes what it superseded
    # compacted: the first snapshot's file and the transfer's; vacuumed: those two and the delete file.
    assert (again.files_compacted, again.files_vacuumed, again.files_after) == (2, 3, 1)
    assert [r["id"] for r in target.destination.current_rows(model=model, recipient=recipient).to_pylist()] == \
        [r["id"] for r in _expected(3) if r["id"] not in (5, BASE + 2)]
    assert verify().passed


def test_a_snapshot_keeps_a_pending_ownership_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The snapshot carries the last transfer's record, so the move still re-syncs the copy at the next transfer."""
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    config = _config(tmp_path)
    for k in range(3):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=k > 0)
    doc = yaml.safe_load(config.read_text())
    doc["recipients"][0]["id_in_provider_system"] = "org_2"
    config.write_text(yaml.safe_dump(doc))
    assert run_command(["transfer-ownership", "orders", "--to", "acme", "--reason", "INC-7", "-c", str(config)]) == 0
    capsys.readouterr()
    [done] = _maintain(config)
    assert done.files_compacted == 3
    moved = ("destination_reset: ownership moved to recipient acme (tenant org_2) by `incsync transfer-ownership`; "
             "the copy is re-synced from its start")
    assert Target(config).state().reset_reason == moved
    outcome = arrow_transfer.run(config, "2024-01-01", scheduled=False)
    assert outcome.full_refresh_reason == moved
    assert [r["id"] for r in Target(config).rows()] == [9000]


def test_maintenance_on_s3_snapshots_and_vacuums(s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.storage.files import open_store
    from incsync.storage.filesystems import resolve_options

    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    url = f"s3://{s3.bucket()}/shared/files"
    config = _config(tmp_path, path=url, storage_options=s3.options(), retention_hours=0)
    for k in range(4):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=k > 0)
    [done] = _maintain(config)
    assert (done.table, done.files_before, done.files_compacted, done.files_vacuumed, done.files_after) == (
        f"{url}/orders/recipient=acme", 4, 4, 4, 1)
    store = open_store(url, resolve_options(s3.options(), "test"))
    keys = sorted(store.relative(f.path) for f in store.list(recursive=True) if f.type.name == "File")
    [manifest] = [k for k in keys if k.startswith("_manifests/orders/dt=")]
    [data] = [k for k in keys if k.endswith(".parquet")]
    assert "-snapshot-" in manifest and "-snapshot-" in data
    assert json.loads(store.read_text(manifest))["bucket_prefix"] == "shared/files"
    assert incsync.read_manifested(url, "orders", "acme", storage_options=s3.options()).sort_by("id").to_pylist() == _expected(3)
    write_table(tmp_path / "src", "orders", _source(4))
    arrow_transfer.run(config, "2024-01-01", scheduled=True)
    assert Target(config).rows() == _expected(4)


def test_a_snapshot_whose_pointer_was_not_updated_is_still_the_newest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash between the snapshot's manifest and the pointer: its name sorts after the last transfer's, so
    the state finds it, and the next transfer continues after it."""
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    config = _config(tmp_path)
    for k in range(3):
        write_table(tmp_path / "src", "orders", _source(k))
        arrow_transfer.run(config, "2024-01-01", scheduled=k > 0)
    pointer = tmp_path / "out" / "files" / "_manifests" / "orders" / "_latest" / "recipient=acme.json"
    behind = pointer.read_text()
    _maintain(config)
    pointer.write_text(behind)
    target = Target(config)
    assert target.state().version == "4" and target.state().reset_reason is None
    write_table(tmp_path / "src", "orders", _source(3))
    after = arrow_transfer.run(config, "2024-01-01", scheduled=True)
    assert target.state().version == "5" and target.state().last_transfer == after.record
    assert target.rows() == _expected(3)

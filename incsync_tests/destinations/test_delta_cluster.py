"""A model's ``cluster_by`` (issue 33): a Delta table's files ordered by a column the recipient's changes
follow, so changes to recently created rows — whose keys are scattered over the key space — rewrite the
last files only, where the same changes rewrite every file of a table laid out by key; and a key whose
cluster value changed after all is still merged right (no duplicate), at the cost of the full scan."""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from incsync.cli.main import run_command
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target
from incsync_tests.support.lake import lake_config, ts, write_table

ROWS = 60_000
DAYS = 100  # creation dates: ROWS // DAYS keys created each day
SMALL_FILES = 1 << 16  # the smallest target_file_size the config takes: many files from few rows
SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("status", pa.string()),
                    ("created_on", pa.date32()), ("updated_at", pa.timestamp("us", tz="UTC"))])
ADDED = 250  # keys created after the backfill (a new creation date), 50 an incremental
IDS = random.Random(33).sample(range(1, 1_000_000_000), ROWS + ADDED)  # the k-th created key: scattered over the key space
FIRST_DAY = date(2023, 9, 1)


def _created(k: int) -> date:
    return FIRST_DAY + timedelta(days=k * DAYS // ROWS)


def _base_time(k: int):
    """The backfill's rows were last updated at 01:00, but for the newest one at 07:00: the high watermark, whose
    lookback the next incremental re-reads (that row alone, created on the last day like the changes)."""
    return ts(1, 9, (k - ROWS) // 50) if k >= ROWS else ts(1, 7) if k == ROWS - 1 else ts(1, 1)


def _source(changed: dict[int, tuple[int, date]], added: int = 0) -> list[dict]:
    """ROWS (+ ``added``) keys in key order (as a table read by its primary key); ``changed``: creation index ->
    (minute after 08:00 it was updated, its creation date now). The j-th added key came at 09:00 + j // 50 minutes."""
    rows = []
    for k, key in enumerate(IDS[:ROWS + added]):
        minute, created = changed.get(k, (None, _created(k)))
        rows.append({"id": key, "organization_id": "org_1", "status": "new" if minute is None else f"changed {minute}",
                     "created_on": created, "updated_at": ts(1, 8) + timedelta(minutes=minute) if minute is not None else _base_time(k)})
    return sorted(rows, key=lambda r: r["id"])


def _config(root: Path, cluster_by: list[str] | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    model = {"columns": [f.name for f in SCHEMA], **({"cluster_by": cluster_by} if cluster_by else {})}
    return lake_config(root, model=model, destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme",
                                                        "target_file_size": SMALL_FILES}])


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def _files(root: Path) -> int:
    return len(DeltaTable(str(root / "out" / "acme" / "orders")).file_uris())


def _sync(root: Path, config: Path, changed: dict[int, tuple[int, date]], added: int = 0, **kwargs):
    write_table(root / "src", "orders", _source(changed, added), schema=SCHEMA)
    return arrow_transfer.run(config, "2024-01-01", **kwargs)


def _expected(changed: dict[int, tuple[int, date]], added: int = 0) -> dict[int, tuple[str, date]]:
    return {r["id"]: (r["status"], r["created_on"]) for r in _source(changed, added)}


def _copy(config: Path) -> dict[int, tuple[str, date]]:
    rows = Target(config).rows()
    assert len(rows) == len({r["id"] for r in rows}), "a key is in the table twice"
    return {r["id"]: (r["status"], r["created_on"]) for r in rows}


def test_changes_to_recent_rows_rewrite_the_last_files_with_cluster_by_and_every_file_without(env: Path) -> None:
    # 300 changes among the keys created on the last day: scattered over the whole key space.
    recent = {k: (1, _created(k)) for k in range(ROWS - 300, ROWS)}
    figures = {}
    for label, cluster_by in (("key", None), ("cluster", ["created_on"])):
        root = env / label
        config = _config(root, cluster_by)
        _sync(root, config, {}, scheduled=False)
        files = _files(root)
        assert files >= 10  # target_file_size splits the table
        out = _sync(root, config, recent, scheduled=True)
        assert out.record.delta_rows_transferred == 300
        assert _copy(config) == _expected(recent)
        figures[label] = (files, out.destination_metadata)
    key_files, by_key = figures["key"]
    cluster_files, by_cluster = figures["cluster"]
    # Laid out by key: every file holds some of the changed keys, and every file is read and rewritten.
    assert by_key["delta_files_removed"] == key_files and by_key["delta_files_scanned"] == key_files
    assert "delta_cluster_fallback" not in by_key
    # Laid out by creation date: the last file or two hold them all; the others are neither read nor rewritten.
    assert 1 <= by_cluster["delta_files_removed"] <= 2 and by_cluster["delta_files_scanned"] <= 2
    assert by_cluster["delta_files_skipped"] == cluster_files - by_cluster["delta_files_scanned"]
    assert by_cluster["delta_cluster_fallback"] == ""
    assert by_cluster["delta_bytes_removed"] * 4 < by_key["delta_bytes_removed"]

    # A full refresh writes the same order again: the next changes still rewrite at most 2 files.
    root, config = env / "cluster", _config(env / "cluster", ["created_on"])
    refreshed = _sync(root, config, recent, scheduled=False, full_refresh=True)
    assert refreshed.destination_metadata["delta_files_added"] >= 10
    more = {**recent, **{k: (2, _created(k)) for k in range(ROWS - 290, ROWS, 2)}}
    out = _sync(root, config, more, scheduled=True)
    assert out.record.delta_rows_transferred == 145 and _copy(config) == _expected(more)
    assert 1 <= out.destination_metadata["delta_files_removed"] <= 2

    # Keys created since arrive in small files (sorted each); compaction bins neighbouring files and keeps
    # their order, so the table stays ordered by creation date.
    for n in range(1, ADDED // 50 + 1):
        assert _sync(root, config, more, added=50 * n, scheduled=True).record.delta_rows_transferred == 50
    before = _files(root)
    assert run_command(["maintain", "-c", str(config)]) == 0
    assert _files(root) < before
    last = {**more, **{k: (120, _created(k)) for k in range(ROWS - 149, ROWS + ADDED, 2)}}
    out = _sync(root, config, last, added=ADDED, scheduled=True)
    assert out.record.delta_rows_transferred == 200 and _copy(config) == _expected(last, ADDED)
    assert 1 <= out.destination_metadata["delta_files_removed"] <= 2
    assert out.destination_metadata["delta_files_scanned"] <= 2 and out.destination_metadata["delta_files_skipped"] >= 3


def test_a_key_whose_cluster_value_changed_is_merged_by_its_key_alone_and_never_duplicated(env: Path) -> None:
    config = _config(env, ["created_on"])
    _sync(env, config, {}, scheduled=False)
    files = _files(env)
    # Key 0 was created on the first day; the source now says the last: outside the batch's range of the
    # table rows it would otherwise match, so the range is dropped for this MERGE (it reads every file).
    moved = {0: (1, _created(ROWS - 1)), **{k: (1, _created(k)) for k in range(ROWS - 10, ROWS)}}
    out = _sync(env, config, moved, scheduled=True)
    meta = out.destination_metadata
    assert out.record.delta_rows_transferred == 11
    assert meta["delta_cluster_fallback"] == (
        "1 key(s) of the batch are held by a row whose created_on lies outside the batch's range (cluster_by must "
        "never change for a key, docs/maintenance.md); merged by the key alone, reading every file the key range spans")
    assert meta["delta_files_scanned"] == files
    copy = _copy(config)
    assert len(copy) == ROWS and copy == _expected(moved)
    assert copy[IDS[0]] == ("changed 1", _created(ROWS - 1))

    # The next batch keeps to the contract again: the range is back, and prunes.
    again = {**moved, **{k: (2, _created(k)) for k in range(ROWS - 20, ROWS - 10)}}
    out = _sync(env, config, again, scheduled=True)
    assert out.destination_metadata["delta_cluster_fallback"] == ""
    assert out.destination_metadata["delta_files_scanned"] <= 2
    assert _copy(config) == _expected(again)

"""`incsync maintain` and the `incsync_maintenance` job (issue 33): a Delta table's storage stays within
its live data plus the retention, no version inside the retention stops being readable, compaction keeps
the key order a MERGE of recent keys relies on, and no transfer publishes while a destination is maintained."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from incsync.cli.main import run_command
from incsync.config.load import load_config
from incsync.destinations.maintenance import stored_bytes
from incsync.errors import ConfigError
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target
from incsync_tests.support.lake import lake_config, order, ts, write_table

ROWS = 20_000
SMALL_FILES = 1 << 16  # the smallest target_file_size the config takes: many files from few rows


def _config(root: Path, *, retention_hours: int | None = None) -> Path:
    destination = {"name": "d", "kind": "delta", "path": "./out/acme", "target_file_size": SMALL_FILES}
    if retention_hours is not None:
        destination["retention_hours"] = retention_hours
    return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "d"}],
                       destinations=[destination])


def _at(minute: int):
    return ts(1, 8 + minute // 60, minute % 60)


def _source(changed: dict[int, int], added: int = 0) -> list[dict]:
    """ROWS orders of org_1 on 2024-01-01 and ``added`` newer ones; ``changed``: id -> the minute (after
    08:00) it was last updated; the k-th added order came at minute k // 10 + 1 after 08:00 (the n-th
    incremental's changes and orders all at minute n)."""
    return [*(order(i, "org_1", _at(changed[i]) if i in changed else ts(1, 1), status="changed" if i in changed else "new")
              for i in range(1, ROWS + 1)),
            *(order(i, "org_1", _at(changed[i]), status="changed") if i in changed else order(i, "org_1", ts(1, 8, k // 10 + 1))
              for k in range(added) for i in [ROWS + k + 1])]


def _live(table: Path) -> int:
    return sum(pa.table(DeltaTable(str(table)).get_add_actions(flatten=False)).column("size_bytes").to_pylist())


def _rewritten(table: Path, version: int) -> int:
    """Data files the commit ``version`` removed (rewrote)."""
    import json

    lines = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return sum(1 for line in lines if "remove" in json.loads(line))


@pytest.fixture
def synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, dict[int, int]]:
    """A backfilled table and 30 incrementals, each adding 10 orders (a small file each) and every third
    one also changing 3 of the newest 1 % of keys (a rewrite of the file holding them)."""
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    config = _config(tmp_path)
    changed: dict[int, int] = {}
    write_table(tmp_path / "src", "orders", _source(changed))
    arrow_transfer.run(config, "2024-01-01", scheduled=False)
    for k in range(30):
        for j in range(3 if k % 3 == 0 else 0):
            changed[ROWS - 150 + 5 * k + j] = k + 1
        write_table(tmp_path / "src", "orders", _source(changed, added=10 * (k + 1)))
        arrow_transfer.run(config, "2024-01-01", scheduled=True)
    return tmp_path, config, changed


def test_a_recipients_first_rows_are_written_in_files_of_the_target_size(tmp_path: Path, monkeypatch) -> None:
    """The first commit into a new table is split by ``target_file_size`` like every later one: one file of
    the whole commit cost delta-rs its size in memory, and the first MERGE rewrote all of it (issue 33)."""
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    config = _config(tmp_path)
    write_table(tmp_path / "src", "orders", _source({}))
    first = arrow_transfer.run(config, "2024-01-01", scheduled=False)
    assert first.record.rows_transferred == ROWS
    files = DeltaTable(str(tmp_path / "out" / "acme" / "orders")).file_uris()
    assert first.destination_metadata["delta_files_added"] == len(files) >= 3, first.destination_metadata


def test_maintenance_bounds_storage_and_keeps_every_version_inside_the_retention(synced, capsys) -> None:
    root, config, changed = synced
    table = root / "out" / "acme" / "orders"
    target = Target(config)
    state = target.state().last_transfer
    newest = DeltaTable(str(table)).version()
    assert stored_bytes(str(table), None) > 3 * _live(table)  # each MERGE left a rewritten copy behind

    assert run_command(["maintain", "--dry-run", "-c", str(config)]) == 0
    dry = capsys.readouterr().out
    assert f"d {table}: " in dry and "file(s) to vacuum" in dry and "1 table(s) looked at (dry run)" in dry
    assert DeltaTable(str(table)).version() == newest  # a dry run commits nothing and deletes nothing

    # Retention 7 days (the default): compaction and a checkpoint; nothing is old enough to vacuum.
    assert run_command(["maintain", "-c", str(config)]) == 0
    out = capsys.readouterr().out
    assert "0 vacuumed" in out and f"checkpoint at version {newest + 1}" in out, out
    grown = re.search(r"vacuumed, stored (\d+\.\d) [kM]B more until the retention passes \(the compacted files' old "
                      r"copies stay for readers of older versions\)\n$", out)
    assert grown is not None and float(grown[1]) > 0, out  # not a negative "freed"
    dt = DeltaTable(str(table))
    assert dt.version() == newest + 1 and (table / "_delta_log" / "_last_checkpoint").exists()
    for version in range(newest + 2):  # every version is inside the retention: each one still reads
        assert DeltaTable(str(table), version=version).to_pyarrow_table().num_rows in (0, ROWS, *range(ROWS + 10, ROWS + 301, 10))
    assert target.state().last_transfer == state  # compaction carries no record and changes none
    rows = {r["id"]: r for r in target.rows()}
    assert len(rows) == ROWS + 300 and sum(r["status"] == "changed" for r in rows.values()) == len(changed) == 30

    # Past the retention (0 hours): what no current reader needs is gone; the copy stays exact.
    _config(root, retention_hours=0)
    assert run_command(["maintain", "-c", str(config)]) == 0
    out = capsys.readouterr().out
    stored, live = stored_bytes(str(table), None), _live(table)
    assert stored <= 1.5 * live, (stored, live, out)
    assert re.search(r"[1-9]\d* vacuumed, freed \d+\.\d [kM]B\n$", out), out
    assert {r["id"]: r for r in target.rows()} == rows

    # Compaction kept the key order: 3 changes among the newest 1 % of keys rewrite at most 2 files.
    changed.update({ROWS + 300 - j: 59 for j in range(0, 150, 50)})  # spread over the newest 1 % of keys
    write_table(root / "src", "orders", _source(changed, added=300))
    after = arrow_transfer.run(config, "2024-01-01", scheduled=True)
    assert after.record.delta_rows_transferred == 3 and target.state().last_transfer == after.record
    assert _rewritten(table, int(after.destination_metadata["delta_table_version"])) <= 2
    assert after.destination_metadata["delta_files_removed"] == _rewritten(table, int(after.destination_metadata["delta_table_version"]))
    assert 0 < after.destination_metadata["delta_bytes_removed"] < _live(table) / 2

    # And after a full refresh, which writes the keys in the order the source gives them, as the backfill did.
    refresh = arrow_transfer.run(config, "2024-01-01", scheduled=False, full_refresh=True)
    assert refresh.destination_metadata["delta_files_added"] >= 3  # target_file_size splits the table again
    changed.update({ROWS + 299 - j: 61 for j in range(0, 150, 50)})
    write_table(root / "src", "orders", _source(changed, added=300))
    last = arrow_transfer.run(config, "2024-01-01", scheduled=True)
    assert last.record.delta_rows_transferred == 3
    assert 1 <= last.destination_metadata["delta_files_removed"] <= 2


def test_maintenance_waits_for_the_transfer_that_holds_the_destination(synced, dagster_instance) -> None:
    from incsync.operations.maintenance import maintain_destinations
    from incsync.operations.slots import FileSlots

    root, config, _ = synced
    slots = FileSlots(Path(dagster_instance.root_directory) / "incsync-slots")
    held = slots.try_take("destination:d", 0, "incsync run 1234abcd (a transfer)")
    assert held is not None
    said: list[str] = []
    started = time.monotonic()
    threading.Timer(1.5, slots.release, [held]).start()
    done = list(maintain_destinations(load_config(config), instance=dagster_instance, notify=said.append))
    assert time.monotonic() - started >= 1.5
    assert said == ["waiting: destination d (max_concurrent_transfers 1) is taken by incsync run 1234abcd (a transfer); "
                    "maintenance starts when it is free"]
    assert [m.table for m in done] == [str(root / "out" / "acme" / "orders")] and done[0].files_compacted > 1
    # The transfer's slot is free again once maintenance is done.
    again = slots.try_take("destination:d", 0, "next")
    assert again is not None
    slots.release(again)


def test_the_maintenance_job_and_schedule_are_in_the_definitions(synced, dagster_instance) -> None:
    from incsync.orchestration.definitions import build_definitions

    root, config, _ = synced
    defs = build_definitions(config)
    schedule = defs.resolve_schedule_def("incsync_maintenance_schedule")
    assert schedule.cron_schedule == "0 3 * * *" and schedule.job_name == "incsync_maintenance"
    result = defs.resolve_job_def("incsync_maintenance").execute_in_process(instance=dagster_instance)
    assert result.success
    [materialization] = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = {k: v.value for k, v in materialization.step_output_data.metadata.items()}
    assert metadata["tables"] == 1 and metadata["tables_skipped"] == 0 and metadata["files_compacted"] > 1
    assert metadata["bytes_live"] == _live(root / "out" / "acme" / "orders")


def test_a_bad_maintenance_frequency_is_refused_by_name(tmp_path: Path) -> None:
    config = _config(tmp_path)
    doc = yaml.safe_load(config.read_text())
    doc["maintenance"] = {"frequency": "every night"}
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert 'maintenance.frequency: "every night" is not a cron expression (e.g. "0 3 * * *")' in str(err.value)


def test_unknown_destination_is_named_with_the_known_ones(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with pytest.raises(ConfigError) as err:
        from incsync.operations.maintenance import maintain_destinations

        list(maintain_destinations(load_config(config), instance=None, destination="nope"))
    assert '"nope" is not a destination of the file; known: [d]' in str(err.value)

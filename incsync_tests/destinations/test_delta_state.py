"""Delta keeps each recipient's transfer state through any number of foreign commits and checkpoints
(issue 13 item 6): application transactions, which checkpoints keep, point at the transfer's commit."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from deltalake import CommitProperties, DeltaTable

from incsync.destinations.registry import INCREMENTAL
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

SOURCE = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))]


def _config(root: Path) -> Path:
    return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "d"}],
                       destinations=[destination_spec("delta", name="d", folder="./out")])


def _foreign_commits(table: Path, n: int) -> None:
    """``n`` commits by other writers (an OPTIMIZE, a VACUUM and empty commits of another tool)."""
    dt = DeltaTable(str(table))
    dt.optimize.compact()
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    for i in range(n):
        dt.create_write_transaction([], mode="append", schema=dt.schema(),
                                    commit_properties=CommitProperties(custom_metadata={"other.tool": str(i)}))


def test_state_survives_100_foreign_commits_a_checkpoint_and_log_cleanup(tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", SOURCE)
    config = _config(tmp_path)
    table = tmp_path / "out" / "orders"
    first = arrow_transfer.run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = target.state().last_transfer
    assert before == first.record

    _foreign_commits(table, 120)
    dt = DeltaTable(str(table))
    assert dt.version() >= 121
    assert target.state().last_transfer == first.record  # read back from the transfer's own commit

    # A checkpoint, then log cleanup with no retention: the transfer's commit file is gone for good.
    dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    dt = DeltaTable(str(table))
    dt.create_checkpoint()
    dt.cleanup_metadata()
    assert not (table / "_delta_log" / f"{int(first.destination_metadata['delta_table_version']):020d}.json").exists()
    state = Target(config).state()
    assert state.reset_reason is None
    assert state.high_watermark == ts(1, 2)
    assert state.last_transfer.fingerprint == first.record.fingerprint

    write_table(tmp_path / "src", "orders", [*SOURCE, order(4, "org_1", ts(1, 5))])
    again = arrow_transfer.run(config, "2024-01-01", scheduled=True)  # a repeat run of the window holding the HW
    assert again.record.transfer_type == INCREMENTAL and again.full_refresh_reason is None
    assert again.bounds.lower == ts(1, 2) - timedelta(seconds=again.record.lookback_seconds)
    assert (again.record.rows_transferred, again.record.delta_rows_transferred) == (2, 1)
    assert sorted(r["id"] for r in target.rows()) == [1, 2, 4]
    assert Target(config).state().last_transfer == again.record


def test_the_transfer_commit_is_found_without_scanning_history(tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", SOURCE)
    config = _config(tmp_path)
    first = arrow_transfer.run(config, "2024-01-01", scheduled=False)
    table = tmp_path / "out" / "orders"
    log = (table / "_delta_log" / f"{int(first.destination_metadata['delta_table_version']):020d}.json").read_text()
    actions = [json.loads(line) for line in log.splitlines()]
    txns = {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a}
    assert txns["incsync:orders:acme:commit"] == first.destination_metadata["delta_table_version"]
    assert set(txns) == {"incsync:orders:acme", "incsync:orders:acme:commit", "incsync:orders:acme:fingerprint"}
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 2

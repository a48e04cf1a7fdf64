"""A Delta destination says where its copy is and in which table format (what a sharing server serves), and with
`change_data_feed: true` its tables keep Delta's change data feed through merges and full refreshes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync_tests.support import arrow_transfer
from incsync_tests.support.lake import lake_config, order, ts, write_table


def _config(tmp_path: Path, **delta: object) -> Path:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2))])
    return lake_config(tmp_path, destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme", **delta}])


def test_a_delta_copy_is_a_delta_table_at_its_location(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    location = build_destination(config.destination("acme_delta")).location(model=config.models[0],
                                                                            recipient=config.recipient("acme"))
    assert (location.path, location.table_format) == (str(tmp_path / "out/acme/orders"), "delta")


@pytest.mark.parametrize("keeps", [True, False], ids=["change data feed", "none"])
def test_change_data_feed_is_kept_through_merges_and_full_refreshes(tmp_path: Path, keeps: bool) -> None:
    file = _config(tmp_path, change_data_feed=keeps)
    arrow_transfer.run(file, "2024-01-01", scheduled=False)
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(2, 1), status="paid"), order(2, "org_1", ts(1, 2))])
    arrow_transfer.run(file, "2024-01-02", scheduled=True)
    arrow_transfer.run(file, "2024-01-02", scheduled=False, full_refresh=True)
    table = DeltaTable(str(tmp_path / "out/acme/orders"))
    assert table.metadata().configuration.get("delta.enableChangeDataFeed") == ("true" if keeps else None)
    if not keeps:
        return
    changes = pa.table(table.load_cdf(starting_version=2, ending_version=2)).select(["id", "status", "_change_type"])
    assert sorted(changes.to_pylist(), key=lambda r: r["_change_type"]) == [
        {"id": 1, "status": "paid", "_change_type": "update_postimage"},
        {"id": 1, "status": "new", "_change_type": "update_preimage"},
    ]
    refreshed = pa.table(table.load_cdf(starting_version=3)).column("_change_type").to_pylist()
    assert sorted(refreshed) == ["delete", "delete", "insert", "insert"]

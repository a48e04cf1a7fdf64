"""A Delta MERGE's memory is bounded by its batch, not by the table it rewrites (issue 33), and the
bound never fails a transfer: past it, the MERGE runs again without one."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from incsync.config.model import ModelConfig
from incsync.destinations.delta import merge as delta_merge
from incsync.staging.batch import stage_arrow

MODEL = ModelConfig(model_name="orders", source="db", source_table="orders", primary_key=["id"],
                    last_modified_column="updated_at", organization_column="organization_id", min_start_time_epoch=0)
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _rows(ids: range | list[int], *, status: str, minutes: int, width: int = 10) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "status": pa.array([status] * len(ids)),
        "payload": pa.array([f"{i:08d}" + "x" * width for i in ids]),
        "updated_at": pa.array([T0 + timedelta(minutes=minutes)] * len(ids), pa.timestamp("us", tz="UTC")),
    })


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    """20,000 rows in 10 files."""
    path = tmp_path / "orders"
    for start in range(1, 20_001, 2_000):
        write_deltalake(str(path), _rows(range(start, start + 2_000), status="new", minutes=0, width=200), mode="append")
    return DeltaTable(str(path))


def _state(dt: DeltaTable) -> dict[int, tuple[str, datetime]]:
    rows = DeltaTable(dt.table_uri).to_pyarrow_table(columns=["id", "status", "updated_at"]).to_pylist()
    return {r["id"]: (r["status"], r["updated_at"]) for r in rows}


def test_decoded_bytes_are_the_footers_uncompressed_size(tmp_path: Path) -> None:
    batch = stage_arrow(_rows(range(1, 5_001), status="new", minutes=0, width=500), tmp_path / "b")
    meta = pq.ParquetFile(batch.files[0]).metadata
    assert batch.decoded_bytes() == sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    assert batch.decoded_bytes() > 2_500_000 > batch.bytes  # 5,000 rows of > 500 characters, compressed on disk
    assert stage_arrow(_rows([], status="new", minutes=0), tmp_path / "empty").decoded_bytes() == 0
    assert delta_merge.merge_memory(batch) == delta_merge.MERGE_MEMORY_FLOOR + 2 * batch.decoded_bytes()


def test_scattered_changes_merge_within_the_bound(table: DeltaTable, tmp_path: Path, caplog) -> None:
    keys = list(range(7, 20_001, 67))  # 299 keys over every file
    batch = stage_arrow(_rows(keys, status="changed", minutes=5), tmp_path / "b")
    before = _state(table)
    with caplog.at_level(logging.WARNING, logger=delta_merge.__name__):
        delta_merge.merge(table, model=MODEL, batch=batch, props=CommitProperties())
    assert not caplog.records
    after = _state(table)
    assert len(after) == 20_000
    assert {k for k, v in after.items() if v != before[k]} == set(keys)
    assert {after[k] for k in keys} == {("changed", T0 + timedelta(minutes=5))}


def test_a_merge_past_its_bound_runs_again_without_it(table: DeltaTable, tmp_path: Path, monkeypatch, caplog) -> None:
    """The join holds the whole batch and cannot spill: a bound below it fails the first MERGE, which
    commits nothing, and the second one, unbounded, commits the batch once."""
    monkeypatch.setattr(delta_merge, "merge_memory", lambda batch: 1 << 20)
    keys = list(range(1, 20_001, 2)) + list(range(30_001, 35_001))  # 10,000 updates, 5,000 inserts, wide rows
    batch = stage_arrow(_rows(keys, status="changed", minutes=5, width=1_000), tmp_path / "b")
    assert batch.decoded_bytes() > 10 << 20
    version = table.version()
    with caplog.at_level(logging.WARNING, logger=delta_merge.__name__):
        delta_merge.merge(table, model=MODEL, batch=batch, props=CommitProperties())
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "the MERGE of model orders needed more than its 1 MB memory bound"
    ]
    assert "running it again without the bound" in caplog.records[0].getMessage()
    assert DeltaTable(table.table_uri).version() == version + 1
    after = _state(table)
    assert len(after) == 25_000
    assert sorted(k for k, v in after.items() if v[0] == "changed") == sorted(keys)
    assert sorted(k for k, v in after.items() if v[0] == "new") == list(range(2, 20_001, 2))

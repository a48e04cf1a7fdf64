"""A recipient's share of a fan-out read is read in place when the files' statistics show every row in its
bounds (a backfill's share, always), and filtered into a copy otherwise."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incsync.staging.batch import StagedBatch, stage_arrow, within_by_statistics


def _ts(day: int, hour: int = 0) -> datetime:
    return datetime(2025, 1, day, hour, tzinfo=UTC)


def _batch(tmp_path: Path, days: list[int | None], *, unit: str = "us", row_group: int | None = None, name: str = "b") -> StagedBatch:
    kind = pa.timestamp(unit, tz="UTC")
    table = pa.table({"id": list(range(len(days))), "updated_at": pa.array([None if d is None else _ts(d) for d in days], kind)})
    if row_group is None:
        return stage_arrow(table, tmp_path / name)
    folder = tmp_path / name
    folder.mkdir()
    file = folder / "part-00000.parquet"
    pq.write_table(table, file, row_group_size=row_group, coerce_timestamps=None if unit == "ms" else "us")
    return StagedBatch(path=folder, files=(file,), schema=table.schema, rows=table.num_rows, bytes=file.stat().st_size)


def test_rows_all_in_bounds_by_statistics(tmp_path: Path) -> None:
    batch = _batch(tmp_path, [3, 5, None, 9], row_group=2)
    assert within_by_statistics(batch, "updated_at", lower=_ts(3), upper=_ts(9, 1))
    assert within_by_statistics(batch, "updated_at", lower=None, upper=None)
    assert not within_by_statistics(batch, "updated_at", lower=_ts(3), upper=_ts(9))  # upper is exclusive
    assert not within_by_statistics(batch, "updated_at", lower=_ts(3, 1), upper=None)  # one row before lower
    assert within_by_statistics(_batch(tmp_path, [None, None], name="nulls"), "updated_at", lower=_ts(3), upper=_ts(4))


def test_no_statistics_or_another_unit_means_filter_the_rows(tmp_path: Path) -> None:
    table = pa.table({"updated_at": pa.array([_ts(4)], pa.timestamp("us", tz="UTC"))})
    folder = tmp_path / "nostats"
    folder.mkdir()
    pq.write_table(table, folder / "p.parquet", write_statistics=False)
    bare = StagedBatch(path=folder, files=(folder / "p.parquet",), schema=table.schema, rows=1, bytes=1)
    assert not within_by_statistics(bare, "updated_at", lower=None, upper=None)
    millis = _batch(tmp_path, [4], unit="ms", row_group=1, name="ms")
    assert not within_by_statistics(
        StagedBatch(path=millis.path, files=millis.files, schema=pa.schema([("id", pa.int64()), ("updated_at", pa.timestamp("us", tz="UTC"))]),
                    rows=1, bytes=1),
        "updated_at", lower=None, upper=None,
    )
    assert not within_by_statistics(_batch(tmp_path, [4], name="text"), "id", lower=None, upper=None)


@pytest.mark.parametrize("in_bounds", [True, False])
def test_a_share_is_the_staged_files_when_in_bounds_and_a_filtered_copy_otherwise(tmp_path: Path, in_bounds: bool) -> None:
    from types import SimpleNamespace

    from incsync.transfer.execute import _share_of

    mine = _batch(tmp_path, [3, 5, None, 9], name="fan")
    model = SimpleNamespace(last_modified_column="updated_at")
    recipient = SimpleNamespace(id_in_provider_system="org_1")
    upper = _ts(10) if in_bounds else _ts(9)
    span = SimpleNamespace(transfer=SimpleNamespace(model=model, recipient=recipient), staging=tmp_path / "span",
                           bounds=SimpleNamespace(lower=_ts(1), upper=upper))
    share = _share_of({"org_1": mine}, mine.schema, span)  # type: ignore[arg-type]
    assert (tmp_path / "span").is_dir()
    if in_bounds:
        assert share is mine  # read in place: no copy written
        assert not any((tmp_path / "span").iterdir())
    else:
        assert share.path == tmp_path / "span" and share.rows == 3
        assert share.table()["id"].to_pylist() == [0, 1, 2]  # the row of day 9 is out; the NULL row stays

"""Staged files whose columns need a faithful Arrow type are rewritten a slice at a time (issue 33): every
row converted exactly, in order, whatever the file's size, and a bad value still named with its key."""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from incsync.core.typemap import ColumnPlan
from incsync.staging.errors import ConversionError
from incsync.staging.spark import CONVERT_ROWS, _convert_files

PLANS = {"amount": ColumnPlan(name="amount", vendor="postgres", source_type="numeric(40,2)", cast="text",
                              arrow="decimal256(40,2)", model="orders", key=("id",))}


def test_a_file_of_several_slices_is_converted_whole_and_in_order(tmp_path: Path) -> None:
    n = 2 * CONVERT_ROWS + 7
    file = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()), "amount": [f"{i}.{i % 100:02d}" for i in range(n)]}), file)
    _convert_files((file,), PLANS, pafs.LocalFileSystem())
    table = pq.read_table(file)
    assert table.schema.field("amount").type == pa.decimal256(40, 2)
    assert table.num_rows == n and pq.ParquetFile(file).metadata.num_row_groups == 3
    assert table["id"].to_pylist() == list(range(n))
    assert table["amount"][n - 1].as_py() == decimal.Decimal(f"{n - 1}.{(n - 1) % 100:02d}")
    assert not list(tmp_path.glob("*.converting"))


def test_an_empty_file_keeps_the_converted_schema(tmp_path: Path) -> None:
    file = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "amount": pa.array([], pa.string())}), file)
    _convert_files((file,), PLANS, pafs.LocalFileSystem())
    assert pq.read_schema(file).field("amount").type == pa.decimal256(40, 2)


def test_a_value_that_does_not_convert_is_named_with_its_key_in_a_later_slice(tmp_path: Path) -> None:
    n = CONVERT_ROWS + 10
    amounts = ["1.00"] * n
    amounts[CONVERT_ROWS + 3] = "not a number"
    file = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()), "amount": amounts}), file)
    with pytest.raises(ConversionError) as err:
        _convert_files((file,), PLANS, pafs.LocalFileSystem())
    assert "'not a number'" in str(err.value) and f"id={CONVERT_ROWS + 3}" in str(err.value)

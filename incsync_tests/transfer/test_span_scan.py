"""A staged span's window counts, NULL check and key uniqueness, read a scan batch at a time (issue 33):
the same answers as over the whole columns, on files of many small row groups, in memory that follows
the scan batch rather than the span."""

from __future__ import annotations

import hashlib
import tracemalloc
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incsync.config.model import ModelConfig
from incsync.core.bounds import to_micros
from incsync.errors import ValidationError
from incsync.staging.batch import StagedBatch
from incsync.transfer.plan import count_by_window
from incsync.transfer.span_scan import count_windows, keys_unique
from incsync_tests.support.lake import ts

DAY = timedelta(days=1)
MODEL = ModelConfig(model_name="orders", source="db", source_table="orders", primary_key=["id"],
                    last_modified_column="updated_at", organization_column="organization_id", min_start_time_epoch=0)


@dataclass(frozen=True)
class Window:
    recipient_id: str
    start: datetime
    end: datetime


WINDOWS = [Window("acme", ts(d), ts(d) + DAY) for d in range(2, 9)]  # Jan 2 .. Jan 8


def staged(folder: Path, table: pa.Table, *, row_group_rows: int, files: int = 1) -> StagedBatch:
    """``table`` staged as ``files`` Parquet files of row groups of ``row_group_rows`` rows."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, per_file = [], -(-table.num_rows // files)
    for i in range(files):
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(table.slice(i * per_file, per_file), path, row_group_size=row_group_rows)
        paths.append(path)
    assert pq.ParquetFile(paths[0]).num_row_groups > 1
    return StagedBatch(path=folder, files=tuple(paths), schema=table.schema, rows=table.num_rows,
                       bytes=sum(p.stat().st_size for p in paths))


def orders(n: int, *, seed: int = 7) -> pa.Table:
    """``n`` rows at shuffled keys, last-modified from Dec 31 (below the first window: the lookback
    overlap) to Jan 10 (above the last), a status as wide as a real row's text."""
    rng = np.random.default_rng(seed)
    first, last = to_micros(ts(1) - DAY), to_micros(ts(10))
    micros = rng.integers(first, last, n)
    return pa.table({
        "id": pa.array(rng.permutation(n) + 1, pa.int64()),
        "organization_id": pa.array(np.where(np.arange(n) % 2, "acme", "globex")),
        "status": pa.array([f"status-{i % 97:03d}-" + "x" * 40 for i in range(n)]),
        "updated_at": pa.array(micros, pa.timestamp("us", tz="UTC")),
    })


def test_window_counts_read_row_group_by_row_group_equal_the_whole_column_and_a_row_by_row_count(tmp_path):
    table = orders(20_000)
    batch = staged(tmp_path / "s", table, row_group_rows=1_000, files=3)
    threshold = to_micros(ts(5, 12))
    counts = count_windows(batch, WINDOWS, model=MODEL, recipient_id="acme", delta_after_micros=threshold,
                           batch_size=777)  # scan batches that straddle row groups
    values = table["updated_at"].cast(pa.int64()).to_pylist()
    assert counts == count_by_window(WINDOWS, values, delta_after_micros=threshold)
    starts = [to_micros(w.start) for w in WINDOWS]
    rows, delta, top = [0] * 7, [0] * 7, [None] * 7
    for v in values:  # the oracle: each row in the last window starting at or before it, the first takes what lies below
        i = max([k for k, s in enumerate(starts) if s <= v], default=0)
        rows[i] += 1
        delta[i] += v > threshold
        top[i] = v if top[i] is None else max(top[i], v)
    assert (counts.rows, counts.delta_rows, counts.max_micros) == (tuple(rows), tuple(delta), tuple(top))
    assert sum(counts.rows) == 20_000 and counts.rows[0] > 0 and counts.rows[-1] > 0
    empty = StagedBatch(path=tmp_path / "e", files=(), schema=table.schema, rows=0, bytes=0)
    none = count_windows(empty, WINDOWS, model=MODEL, recipient_id="acme", delta_after_micros=None)
    assert (none.rows, none.max_micros) == ((0,) * 7, (None,) * 7)


def test_null_last_modified_rows_in_a_later_row_group_are_refused_naming_their_keys(tmp_path):
    table = orders(5_000)
    lm = table["updated_at"].to_pylist()
    for row in (4_321, 4_999):
        lm[row] = None
    table = table.set_column(3, "updated_at", pa.array(lm, pa.timestamp("us", tz="UTC")))
    ids = table["id"].to_pylist()
    batch = staged(tmp_path / "s", table, row_group_rows=500)
    with pytest.raises(ValidationError) as error:
        count_windows(batch, WINDOWS, model=MODEL, recipient_id="acme", delta_after_micros=None)
    assert str(error.value) == (
        f"model orders, recipient acme: 2 row(s) have a NULL last-modified column updated_at "
        f"(keys ({ids[4_321]}), ({ids[4_999]})); nothing was published. Fix the source rows or the model."
    )


def test_a_span_without_its_last_modified_column_is_refused_by_name(tmp_path):
    batch = staged(tmp_path / "s", orders(2_000).drop_columns(["updated_at"]), row_group_rows=500)
    with pytest.raises(ValidationError, match=r"^model orders, recipient acme: staged batch lacks columns \(updated_at\); "):
        count_windows(batch, WINDOWS, model=MODEL, recipient_id="acme", delta_after_micros=None)


def with_key_of(table: pa.Table, key: list[str], *, row: int, like: int) -> pa.Table:
    """``table`` with row ``row`` given the key of row ``like`` (its other values its own)."""
    for name in key:
        values = table[name].to_pylist()
        values[row] = values[like]
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type))
    return table


@pytest.mark.parametrize("key", [["id"], ["status"], ["organization_id", "status"], ["updated_at"]])
def test_keys_unique_over_many_row_groups_finds_a_repeat_in_any_two_of_them(tmp_path, key):
    """An integer key is compared itself, any other by its hash: both find a repeat across files and row groups."""
    table = orders(6_000)
    table = table.set_column(2, "status", pa.array([f"s{i}" for i in range(6_000)]))  # a unique text key
    assert keys_unique(staged(tmp_path / "u", table, row_group_rows=400, files=2), key, batch_size=333) is True
    repeated = with_key_of(table, key, row=5_900, like=17)
    assert keys_unique(staged(tmp_path / "r", repeated, row_group_rows=400, files=2), key, batch_size=333) is False
    if len(key) == 2:  # a repeat in one of the columns only is no repeat of the key
        half = with_key_of(table, ["status"], row=5_900, like=19)  # row 19 is of the other organization
        assert keys_unique(staged(tmp_path / "h", half, row_group_rows=400, files=2), key, batch_size=333) is True


def test_counting_and_key_checks_of_a_span_hold_a_scan_batch_not_its_columns(tmp_path):
    """1,000,000 staged rows (16 MB of key and last-modified): Arrow's peak stays at a few scan batches,
    and Python's at the 8 bytes a row the key check keeps by design, not at the columns' 16 MB."""
    n = 1_000_000
    rng = np.random.default_rng(3)
    table = pa.table({"id": pa.array(rng.permutation(n), pa.int64()),
                      "updated_at": pa.array(rng.integers(to_micros(ts(1)), to_micros(ts(10)), n), pa.timestamp("us", tz="UTC"))})
    batch = staged(tmp_path / "s", table, row_group_rows=50_000)
    expected = count_by_window(WINDOWS, table["updated_at"].cast(pa.int64()).to_numpy(), delta_after_micros=None)
    del table

    def peaks(work):  # noqa: ANN001, ANN202
        pool, default = pa.proxy_memory_pool(pa.default_memory_pool()), pa.default_memory_pool()
        pa.set_memory_pool(pool)
        tracemalloc.start()
        try:
            result = work()
            return result, pool.max_memory(), tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            pa.set_memory_pool(default)

    counts, arrow_peak, python_peak = peaks(
        lambda: count_windows(batch, WINDOWS, model=MODEL, recipient_id="acme", delta_after_micros=None))
    assert counts == expected
    assert arrow_peak > 0, "the scan did not allocate from the pool measured"
    assert arrow_peak < 4 << 20, f"counting windows held {arrow_peak:,} bytes of Arrow memory"
    assert python_peak < 4 << 20, f"counting windows held {python_peak:,} bytes of Python memory"
    unique, arrow_peak, python_peak = peaks(lambda: keys_unique(batch, ["id"]))
    assert unique is True
    assert arrow_peak < 4 << 20, f"the key check held {arrow_peak:,} bytes of Arrow memory"
    assert 8 * n <= python_peak < 8 * n + (4 << 20), f"the key check held {python_peak:,} bytes of Python memory"


@pytest.mark.parametrize("threshold", [None, ts(5, 12)])
def test_a_commit_validated_a_read_batch_at_a_time_has_the_facts_of_its_whole_columns(tmp_path, threshold):
    from incsync.transfer.validate import _validate_in_memory, validate_and_count

    batch = staged(tmp_path / "s", orders(9_000), row_group_rows=700, files=2)
    streamed = validate_and_count(batch, model=MODEL, recipient_id="acme", delta_threshold=threshold, batch_size=500)
    whole = _validate_in_memory(batch, model=MODEL, recipient_id="acme", delta_threshold=threshold)
    assert streamed == whole
    assert streamed.rows == 9_000 and 0 < streamed.delta_rows <= 9_000 and streamed.max_last_modified.tzinfo is not None


def test_a_commit_with_a_repeated_or_null_key_in_a_later_row_group_is_refused_naming_them(tmp_path):
    from incsync.transfer.validate import validate_and_count

    table = orders(4_000)
    ids = table["id"].to_pylist()
    repeated = with_key_of(table, ["id"], row=3_999, like=5)
    with pytest.raises(ValidationError) as error:
        validate_and_count(staged(tmp_path / "r", repeated, row_group_rows=300), model=MODEL, recipient_id="acme",
                           delta_threshold=None)
    assert str(error.value) == (
        f"model orders, recipient acme: 1 primary key value(s) (id) occur more than once in the batch: ({ids[5]}); "
        "nothing was published. Fix the source or choose a primary_key that is unique."
    )
    null_key = table.set_column(0, "id", pa.array(ids[:3_500] + [None] + ids[3_501:], pa.int64()))
    with pytest.raises(ValidationError) as error:
        validate_and_count(staged(tmp_path / "n", null_key, row_group_rows=300), model=MODEL, recipient_id="acme",
                           delta_threshold=None)
    assert str(error.value) == (
        "model orders, recipient acme: 1 row(s) have a NULL primary key (id) (e.g. (None)); nothing was published. "
        "Fix the source rows or the model's primary_key."
    )


def test_reading_a_wide_staged_file_holds_a_row_group_not_the_file(tmp_path):
    """A big tenant's backfill slices its span into commits, each a read of every staged file. Arrow's
    Parquet reader pre-buffers a file's column chunks by default (``pre_buffer``), so each read held up to
    the whole file: a 3,000,000-row span of issue 46's 10-column shape held 125 MB of Arrow memory, and the
    process ~250 MB more than for a tenant a tenth its size. Read without it, the peak follows the read
    batch. Measured in a fresh process: the pre-buffer's reads take Arrow's default pool, not one set later."""
    import subprocess
    import sys

    n = 400_000
    notes = [hashlib.md5(str(i).encode()).hexdigest() + hashlib.md5(str(-i).encode()).hexdigest() for i in range(n)]
    table = orders(n).append_column("note", pa.array(notes))  # 64 characters that do not compress well
    batch = staged(tmp_path / "s", table, row_group_rows=20_000)
    del table
    script = (
        "import sys; from pathlib import Path; import pyarrow as pa, pyarrow.parquet as pq\n"
        "from incsync.staging.batch import StagedBatch\n"
        "f = Path(sys.argv[1]); schema = pq.read_schema(f)\n"
        "b = StagedBatch(path=f.parent, files=(f,), schema=schema, rows=0, bytes=0)\n"
        "rows = sum(part.num_rows for part in b.batches(batch_size=20_000))\n"
        "print(rows, pa.default_memory_pool().max_memory())\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(batch.files[0])], capture_output=True, text=True, check=True)
    rows, peak = map(int, out.stdout.split())
    assert rows == n
    assert 0 < peak < batch.bytes // 2, f"reading held {peak:,} bytes of Arrow memory for a {batch.bytes:,}-byte file"

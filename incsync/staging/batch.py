"""The staged batch (Parquet files private to one transfer) and staging from Arrow: write a table, filter or slice a batch."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from incsync.storage.files import StoragePath

SCAN_ROWS = 65_536  # rows a read batch: 0.5 MB of an int64 column, ~13 MB of 200-byte rows
# Staged files are read without Arrow's pre-buffering (``pre_buffer=False``): with it, a read of a file's row
# groups one after the other holds every column chunk it will read, i.e. the whole file (a 3,000,000-row span
# of 10 columns: 125 MB of Arrow memory against 33 MB, and slower on local files: 0.73-0.92 s against 0.54 s).
# A big tenant's backfill reads its span once per commit, so its memory grew with the tenant.


@dataclass(frozen=True)
class StagedBatch:
    """Parquet files private to one transfer; every later step reads these, never the source.

    Local staging holds ``Path``s; staging on an object store (``staging_dir: s3://...``) holds paths on
    ``filesystem``.
    """

    path: Path | StoragePath
    files: tuple[Path, ...] | tuple[str, ...]
    schema: pa.Schema
    rows: int
    bytes: int

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self.path.fs if isinstance(self.path, StoragePath) else pafs.LocalFileSystem()

    def dataset(self) -> ds.Dataset:
        return ds.dataset([str(f) for f in self.files], format="parquet", schema=self.schema, filesystem=self.filesystem)

    def batches(self, columns: list[str] | None = None, *, batch_size: int = SCAN_ROWS) -> Iterator[pa.RecordBatch]:
        """The staged rows (only ``columns``, None: all), file by file and row group by row group, in the
        batch's schema. Read in the consumer's thread, nothing ahead: Arrow's dataset scanner decodes row
        groups ahead of a slow consumer (a COPY, a Parquet writer) with no bound, so its memory grew with
        the span, where this holds a row group's column chunks."""
        schema = self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
        fs = self.filesystem
        for file in self.files:
            with fs.open_input_file(str(file)) as source:
                parquet = pq.ParquetFile(source, pre_buffer=False)  # see the note at SCAN_ROWS
                present = set(parquet.schema_arrow.names)
                names = [f.name for f in schema if f.name in present]
                for part in parquet.iter_batches(batch_size=batch_size, columns=names):
                    yield _conform(part, schema)

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def table(self, columns: list[str] | None = None) -> pa.Table:
        return self.dataset().to_table(columns=columns)

    def decoded_bytes(self) -> int:
        """The rows' size once decoded, as the files' footers state it (row groups' uncompressed bytes):
        what an engine holding the whole batch in memory (a MERGE's join) needs, give or take Arrow's
        offsets. Reads only the footers."""
        fs, total = self.filesystem, 0
        for file in self.files:
            with fs.open_input_file(str(file)) as source:
                meta = pq.ParquetFile(source).metadata
                total += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        return total


def _conform(part: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A file's batch in the batch's schema: its types, its field metadata, NULLs for a column the file lacks."""
    columns = []
    for field in schema:
        i = part.schema.get_field_index(field.name)
        column = pa.nulls(part.num_rows, field.type) if i < 0 else part.column(i)
        columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def filesystem_of(path: Path | StoragePath) -> pafs.FileSystem:
    return path.fs if isinstance(path, StoragePath) else pafs.LocalFileSystem()


def file_ref(file: Path | StoragePath) -> Path | str:
    """What a StagedBatch keeps of a file: its local Path, or its path on the object store."""
    return file.path if isinstance(file, StoragePath) else file


def files_size(files: tuple[Path, ...] | tuple[str, ...], fs: pafs.FileSystem) -> int:
    if isinstance(fs, pafs.LocalFileSystem):
        return sum(Path(f).stat().st_size for f in files)
    return sum(info.size or 0 for info in fs.get_file_info([str(f) for f in files]))


def files_dataset(files: tuple[Path, ...] | tuple[str, ...], fs: pafs.FileSystem, schema: pa.Schema | None = None) -> ds.Dataset:
    return ds.dataset([str(f) for f in files], format="parquet", schema=schema, filesystem=fs)


def stage_arrow(table: pa.Table, path: Path | StoragePath, *, schema: pa.Schema | None = None) -> StagedBatch:
    """Write ``table`` as one Parquet file in ``path`` (none when it is empty); ``schema``: the batch's, else the table's."""
    path.mkdir(parents=True, exist_ok=True)
    fs = filesystem_of(path)
    files: tuple[Path, ...] | tuple[str, ...] = ()
    if table.num_rows:
        file = file_ref(path / "part-00000.parquet")
        pq.write_table(table, str(file), coerce_timestamps="us", filesystem=fs)
        files = (file,)  # type: ignore[assignment]  # a one-file tuple of either kind
    schema = (schema or table.schema).remove_metadata()
    return StagedBatch(path=path, files=files, schema=schema, rows=table.num_rows, bytes=files_size(files, fs))


SLICE_ROWS = 65_536
_UNITS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def within_by_statistics(batch: StagedBatch, column: str, *, lower: datetime | None, upper: datetime | None) -> bool:
    """Whether every non-NULL value of the timestamp ``column`` lies in ``[lower, upper)`` (None: unbounded),
    by the files' row-group statistics alone: no row is decoded. False when a row group has no statistics
    or stores the column in another unit, so the caller filters the rows instead."""
    kind = batch.schema.field(column).type
    if not pa.types.is_timestamp(kind):
        return False
    lo = None if lower is None else pa.scalar(lower, kind).value
    hi = None if upper is None else pa.scalar(upper, kind).value
    unit = f"timeUnit={_UNITS[kind.unit]}"
    for stats in valued_statistics(batch, column):
        if stats is None or not stats.has_min_max or stats.physical_type != "INT64" or unit not in str(stats.logical_type):
            return False
        if (lo is not None and stats.min_raw < lo) or (hi is not None and stats.max_raw >= hi):
            return False
    return True


def valued_statistics(batch: StagedBatch, column: str) -> Iterator[pq.Statistics | None]:
    """The statistics of ``column`` in each row group of the batch's files that holds a non-NULL value of it
    (None: that row group has no statistics). Files without the column are skipped: their rows read as NULL."""
    fs = batch.filesystem
    for file in batch.files:
        with fs.open_input_file(str(file)) as source:
            meta = pq.ParquetFile(source).metadata
        leaf = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == column), None)
        if leaf is None:
            continue
        for r in range(meta.num_row_groups):
            group = meta.row_group(r)
            stats = group.column(leaf).statistics
            if group.num_rows == 0 or (stats is not None and stats.null_count == group.num_rows):
                continue
            yield stats


def filtered_batch(batch: StagedBatch, path: Path | StoragePath, where: ds.Expression | None) -> StagedBatch:
    """The staged rows matching ``where`` (None: all), as a batch of its own in ``path`` (same schema),
    written as they are read: memory follows ``SCAN_ROWS`` rows, not the slice nor the span (a commit of
    a big tenant's backfill is up to ``max_rows_per_batch`` rows of a span of millions)."""
    path.mkdir(parents=True, exist_ok=True)
    fs = filesystem_of(path)
    file = file_ref(path / "part-00000.parquet")
    schema = batch.schema.remove_metadata()
    rows, writer = 0, None
    try:
        for read in batch.batches():
            part = read if where is None else read.filter(where)
            if not part.num_rows:
                continue
            if writer is None:
                writer = pq.ParquetWriter(str(file), schema, coerce_timestamps="us", filesystem=fs)
            writer.write_batch(part.replace_schema_metadata(None))
            rows += part.num_rows
    finally:
        if writer is not None:
            writer.close()
    files: tuple[Path, ...] | tuple[str, ...] = (file,) if rows else ()  # type: ignore[assignment]  # a one-file tuple of either kind
    return StagedBatch(path=path, files=files, schema=schema, rows=rows, bytes=files_size(files, fs))


def slice_batch(
    batch: StagedBatch, path: Path | StoragePath, column: str, *, lower: datetime | None, upper: datetime | None
) -> StagedBatch:
    """The staged rows with ``lower <= column < upper`` (None: unbounded), as a batch of its own."""
    field = ds.field(column)
    kind = batch.schema.field(column).type
    where = None
    if lower is not None:
        where = field >= pa.scalar(lower, kind)
    if upper is not None:
        below = field < pa.scalar(upper, kind)
        where = below if where is None else where & below
    return filtered_batch(batch, path, where)

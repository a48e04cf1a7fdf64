"""The staged batch (Parquet files private to one transfer) and staging from Arrow: write a table, filter or slice a batch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from incsync.storage.files import StoragePath


READAHEAD_BATCHES = 2  # Arrow's default reads 16 batches and 4 files ahead of the consumer


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

    def scanner(self, **options: object) -> ds.Scanner:
        """A scan that reads ahead one file and a few batches: memory follows a row group, not the batch."""
        return self.dataset().scanner(batch_readahead=READAHEAD_BATCHES, fragment_readahead=1, **options)

    def reader(self) -> pa.RecordBatchReader:
        return self.scanner().to_reader()

    def table(self, columns: list[str] | None = None) -> pa.Table:
        return self.dataset().to_table(columns=columns)


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
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    fs = filesystem_of(path)
    files: tuple[Path, ...] | tuple[str, ...] = ()
    if table.num_rows:
        file = file_ref(path / "part-00000.parquet")
        pq.write_table(table, str(file), coerce_timestamps="us", filesystem=fs)
        files = (file,)  # type: ignore[assignment]
    schema = (schema or table.schema).remove_metadata()
    return StagedBatch(path=path, files=files, schema=schema, rows=table.num_rows, bytes=files_size(files, fs))


def last_modified_micros(batch: StagedBatch, column: str) -> np.ndarray:
    """The batch's last-modified values as int64 microseconds since the epoch (validated non-null)."""
    if batch.rows == 0:
        return np.zeros(0, dtype=np.int64)
    values = batch.table(columns=[column])[column]
    return pc.cast(pc.cast(values, pa.timestamp("us", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False)


SLICE_ROWS = 65_536


def filtered_batch(batch: StagedBatch, path: Path | StoragePath, where: ds.Expression | None) -> StagedBatch:
    """The staged rows matching ``where`` (None: all), as a batch of its own in ``path`` (same schema),
    written as they are scanned: memory follows ``SLICE_ROWS`` rows, not the slice (a commit of a big
    tenant's backfill is up to ``max_rows_per_batch`` rows)."""
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    fs = filesystem_of(path)
    file = file_ref(path / "part-00000.parquet")
    schema = batch.schema.remove_metadata()
    rows, writer = 0, None
    scanned = batch.scanner(filter=where, batch_size=SLICE_ROWS).to_batches() if batch.rows else iter(())
    try:
        for part in scanned:
            if not part.num_rows:
                continue
            if writer is None:
                writer = pq.ParquetWriter(str(file), schema, coerce_timestamps="us", filesystem=fs)
            writer.write_batch(part.replace_schema_metadata(None))
            rows += part.num_rows
    finally:
        if writer is not None:
            writer.close()
    files: tuple[Path, ...] | tuple[str, ...] = (file,) if rows else ()  # type: ignore[assignment]
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

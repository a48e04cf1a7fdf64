"""Stage a batch once as Parquet from Spark: its writes, the faithful types of its files, the staged-count check."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from incsync.core.typemap import FINITE_MARK, ColumnPlan
from incsync.errors import StagingError
from incsync.staging.batch import StagedBatch, file_ref, files_dataset, files_size, filesystem_of, stage_arrow
from incsync.staging.errors import ConversionError
from incsync.staging.type_conversion import column_plans, convert_table, faithful_schema
from incsync.storage.files import StoragePath

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def stage(df: DataFrame | pa.Table, path: Path | StoragePath, *, known_empty: bool = False, collect: bool = False) -> StagedBatch:
    """Write ``df`` once (UTC microsecond timestamps) and describe the files.

    An Arrow table (from a source read without Spark) is written as one Parquet file. ``known_empty``
    (the source said no row is in bounds) skips Spark's write job: the batch is empty, with the schema
    Spark's empty Parquet file would have had. ``collect`` (the source counted a small batch) brings the
    rows through Arrow and writes them here, with that same schema, instead of running a write job.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(df, pa.Table):
        return stage_arrow(df, path)
    plans = column_plans(df)
    if known_empty:
        path.mkdir(parents=True, exist_ok=True)
        return StagedBatch(path=path, files=(), schema=faithful_schema(spark_parquet_schema(df), plans), rows=0, bytes=0)
    if collect:
        table, schema = _collect(df, plans)
        return stage_arrow(table, path, schema=schema)
    written = _write(df, path, plans)
    fs = filesystem_of(path)
    files = tuple(sorted(file_ref(p) for p in path.glob("*.parquet")))
    schema = _faithful_files(df, files, plans, fs)
    rows = files_dataset(files, fs, schema).count_rows() if files else 0
    check_staged_rows(path, extracted=written, staged=rows)
    return StagedBatch(path=path, files=files, schema=schema, rows=rows, bytes=files_size(files, fs))


def write_through_arrow(df: DataFrame, path: StoragePath, *, partition_by: str | None = None) -> int:
    """Write ``df`` as Parquet under ``path`` on an object store, from Spark's tasks through pyarrow.

    Spark reaches ``s3://`` only with the Hadoop S3 connector (hadoop-aws jars), which this installation
    lacks; each task writes its rows itself (``mapInArrow``), so executors on other hosts stage straight to
    the object store. ``partition_by`` splits the files into ``<column>=<value>/`` folders, as Spark's
    ``partitionBy`` does. Returns the rows written.
    """
    from urllib.parse import quote

    schema = spark_parquet_schema(df)  # UTC microsecond timestamps, as Spark's own Parquet files
    fs, root, run = path.fs, path.path, uuid.uuid4().hex[:12]
    body = pa.schema([f for f in schema if f.name != partition_by])

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        task = TaskContext.get().partitionId()
        writers: dict[str, pq.ParquetWriter] = {}
        rows = 0
        try:
            for batch in batches:
                batch = batch.cast(schema)
                rows += batch.num_rows
                if partition_by is None:
                    parts = {"": batch}
                else:
                    text = batch.column(partition_by)
                    parts = {
                        str(v): batch.filter(pc.equal(text, v)).drop_columns([partition_by])
                        for v in pc.unique(text).to_pylist()
                    }
                for value, part in parts.items():
                    if value not in writers:
                        folder = f"{root}/{partition_by}={quote(value, safe='')}" if partition_by else root
                        writers[value] = pq.ParquetWriter(f"{folder}/part-{task:05d}-{run}.parquet", body,
                                                          filesystem=fs, coerce_timestamps="us")
                    writers[value].write_batch(part)
        finally:
            for writer in writers.values():
                writer.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))

    return sum(r["rows"] for r in df.mapInArrow(write, "rows long").collect())


# Row groups of staged files: what this process decodes at once when it reads them back (with Spark's
# 128 MB default a big tenant's publish would hold far more decoded columns than a commit needs).
ROW_GROUP_BYTES = 16 << 20


def write_observed(df: DataFrame, path: Path, *, partition_by: str | None = None) -> int | None:
    """Write ``df`` as Parquet under ``path`` and return how many rows Spark wrote (None: not observable)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("incsync_staged")
    writer = df.observe(observation, F.count(F.lit(1)).alias("rows")).write.mode("overwrite")
    writer = writer.option("outputTimestampType", "TIMESTAMP_MICROS").option("parquet.block.size", str(ROW_GROUP_BYTES))
    (writer.partitionBy(partition_by) if partition_by else writer).parquet(str(path))
    try:
        return int(observation.get["rows"])
    except Exception:  # noqa: BLE001 - an engine without observations: the staged count stands alone
        return None


def check_staged_rows(path: Path, *, extracted: int | None, staged: int) -> None:
    """The rows this process finds staged must be the rows Spark wrote: executors that write to a
    folder the driver cannot see (a cluster without shared staging) must fail, never publish nothing."""
    if extracted is not None and extracted != staged:
        raise StagingError(
            f"staging {path}: Spark wrote {extracted} row(s) but {staged} are visible here; nothing was published. "
            "Spark's executors and this process must share the staging folder: set `staging_dir` (or "
            "INCSYNC_STAGING_DIR) to storage both can reach."
        )


TENANT_PARTITION = "__incsync_tenant"
STRAY_TENANT = -1  # the folder of rows whose tenant is none of the run's


def stage_by_tenant(
    df: DataFrame, path: Path | StoragePath, column: str, tenants: Sequence[str], *, known_empty: bool = False,
    collect: bool = False,
) -> tuple[pa.Schema, dict[str, StagedBatch]]:
    """Stage a fan-out read once, split by the tenant column's text: the schema, and a batch per tenant value.

    ``tenants`` are the run's tenant values (the plan's, ``Read.tenants``); each one's rows go to a folder
    named by its index there, never by the value: a value ``validate`` accepts may be 255 characters of
    any script, past the 255 bytes a file name holds. Rows whose tenant text is none of ``tenants`` share
    one folder, keyed here by each of their values (the caller refuses them, naming them). Spark writes the
    split itself (``partitionBy`` on the index, so the files keep the column as it was); a small read
    collected through Arrow is split here. Every later step reads only its tenant's files.
    """
    path.mkdir(parents=True, exist_ok=True)
    tenants = list(dict.fromkeys(tenants))
    plans = column_plans(df)
    if known_empty:
        return faithful_schema(spark_parquet_schema(df), plans), {}
    if collect:
        table, schema = _collect(df, plans)
        text = pc.cast(table[column], pa.string())
        return schema, {
            str(value): stage_arrow(table.filter(pc.equal(text, value)), path / f"t{i:05d}", schema=schema)
            for i, value in enumerate(pc.unique(text).to_pylist())
        }
    written = _write(df.withColumn(TENANT_PARTITION, tenant_index(column, tenants)), path, plans, partition_by=TENANT_PARTITION)
    fs = filesystem_of(path)
    folders = sorted((p for p in path.glob(f"{TENANT_PARTITION}=*") if p.is_dir()), key=str)
    files = {f: tuple(sorted(file_ref(p) for p in f.glob("*.parquet"))) for f in folders}
    schema = _faithful_files(df, tuple(f for parts in files.values() for f in parts), plans, fs)
    batches, staged = {}, 0
    for folder, parts in files.items():
        rows = files_dataset(parts, fs, schema).count_rows() if parts else 0
        batch = StagedBatch(path=folder, files=parts, schema=schema, rows=rows, bytes=files_size(parts, fs))
        index = int(folder.name.split("=", 1)[1])
        batches.update(dict.fromkeys([tenants[index]] if index != STRAY_TENANT else _values(batch, column), batch))
        staged += rows
    check_staged_rows(path, extracted=written, staged=staged)
    return schema, batches


def tenant_index(column: str, tenants: Sequence[str]):  # noqa: ANN201 - a Spark Column
    """The index in ``tenants`` of the row's tenant text; ``STRAY_TENANT`` for any other value (or NULL)."""
    from pyspark.sql import functions as F

    if not tenants:
        return F.lit(STRAY_TENANT)
    lookup = F.create_map(*(F.lit(x) for i, value in enumerate(tenants) for x in (value, i)))
    return F.coalesce(lookup[F.col(column).cast("string")], F.lit(STRAY_TENANT))


def _values(batch: StagedBatch, column: str) -> list[str]:
    """The distinct tenant texts of a batch (its rows' values, as the column's text)."""
    values = pc.unique(pc.cast(batch.table(columns=[column])[column], pa.string())).to_pylist() if batch.rows else []
    return [str(v) for v in values] or [str(STRAY_TENANT)]


def _collect(df: DataFrame, plans: dict[str, ColumnPlan]) -> tuple[pa.Table, pa.Schema]:
    """A small read brought through Arrow, in its faithful types, with the schema Spark's files would have."""
    spark_schema = spark_parquet_schema(df)
    with _out_of_range(plans):
        collected = df.toArrow()
    return convert_table(collected.cast(spark_schema), plans), faithful_schema(spark_schema, plans)


def _write(df: DataFrame, path: Path | StoragePath, plans: dict[str, ColumnPlan], *, partition_by: str | None = None) -> int | None:
    """Spark's write job (through Arrow to an object store); the rows it wrote, where Spark says."""
    with _out_of_range(plans):
        if isinstance(path, StoragePath):
            return write_through_arrow(df, path, partition_by=partition_by)
        return write_observed(df, path, partition_by=partition_by)


def _faithful_files(
    df: DataFrame, files: tuple[Path, ...] | tuple[str, ...], plans: dict[str, ColumnPlan], fs: pafs.FileSystem,
) -> pa.Schema:
    """Rewrite the written files' columns that need a faithful type; the batch's schema."""
    if any(plan.arrow for plan in plans.values()):
        _convert_files(files, plans, fs)
    return faithful_schema(_utc_schema(df, files_dataset(files[:1], fs).schema if files else None), plans)


@contextmanager
def _out_of_range(plans: dict[str, ColumnPlan]) -> Iterator[None]:
    """Spark's reader overflows on dates it cannot hold (PostgreSQL 'infinity' in a last-modified column), and a
    PostgreSQL timestamp at the greatest 64-bit microsecond would read as 'infinity' (``typemap.INFINITY``)."""
    try:
        yield
    except Exception as exc:
        marked = re.search(rf'{FINITE_MARK} column (.*?) holds (.*?) at key ([^"]*)', str(exc))
        if marked and plans:
            column, value, key = marked.groups()
            plan = plans.get(column)
            raise ConversionError(
                f'model {next(iter(plans.values())).model}: column "{column}" '
                f"({plan.vendor if plan else 'postgres'} {plan.source_type if plan else 'timestamp'}) holds {value!r} "
                f"(key {key}), which staging cannot tell from 'infinity' (it holds ±infinity as the least and greatest "
                "64-bit microsecond); nothing was published. "
                f'Set `column_types: {{"{column}": text}}` on the model to transfer it as its text.'
            ) from None
        suspects = [p for p in plans.values() if "date" in p.source_type.lower() or "timestamp" in p.source_type.lower()]
        if not suspects or "long overflow" not in str(exc).lower():
            raise
        names = ", ".join(p.name for p in suspects)
        raise ConversionError(
            f"model {suspects[0].model}: a value of date/timestamp column(s) [{names}] is outside what Spark can "
            "represent (PostgreSQL 'infinity' / '-infinity', or a year past 9999); nothing was published. "
            f'Read such a column as text with `column_types: {{"{suspects[0].name}": text}}` on the model.'
        ) from None


CONVERT_ROWS = 65_536


def _convert_files(files: tuple[Path, ...] | tuple[str, ...], plans: dict[str, ColumnPlan], fs: pafs.FileSystem) -> None:
    """Rewrite Spark's files with the planned Arrow types (only batches that have such columns pay this),
    64k rows at a time into a file beside each, then over it: memory follows those rows, not the file (a
    big tenant's window is one file of millions of rows)."""
    import pyarrow.parquet as pq

    for file in files:
        converted = f"{file}.converting"
        with fs.open_input_file(str(file)) as source:
            reader = pq.ParquetFile(source, pre_buffer=False)  # a row group at a time (the note at staging.batch.SCAN_ROWS)
            writer = None
            for batch in reader.iter_batches(batch_size=CONVERT_ROWS):
                part = convert_table(pa.Table.from_batches([batch]), plans).replace_schema_metadata(None)  # Spark's schema is stale
                if writer is None:
                    writer = pq.ParquetWriter(converted, part.schema, coerce_timestamps="us", filesystem=fs)
                writer.write_table(part)
            if writer is None:  # no row group: an empty file keeps the converted schema
                empty = convert_table(reader.schema_arrow.empty_table(), plans).replace_schema_metadata(None)
                writer = pq.ParquetWriter(converted, empty.schema, coerce_timestamps="us", filesystem=fs)
            writer.close()
        fs.move(converted, str(file))


def _utc_schema(df: DataFrame, file_schema: pa.Schema | None) -> pa.Schema:
    if file_schema is not None:
        return file_schema.remove_metadata()
    return spark_parquet_schema(df)


def spark_parquet_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of the Parquet files Spark writes for ``df``: UTC timestamps, Spark's nullability."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in to_arrow_schema(df.schema, timezone="UTC")])


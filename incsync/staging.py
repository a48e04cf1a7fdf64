"""Stage a batch once as Parquet, then validate and count it from the staged files."""

from __future__ import annotations

import fcntl
import functools
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from incsync.config import ModelConfig
from incsync.errors import StagingError, ValidationError
from incsync.storage import StoragePath
from incsync.type_conversion import ConversionError, column_plans, convert_table, faithful_schema
from incsync.typemap import FINITE_MARK, ColumnPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_REPORTED_KEYS = 10


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

    def reader(self) -> pa.RecordBatchReader:
        return self.dataset().scanner().to_reader()

    def table(self, columns: list[str] | None = None) -> pa.Table:
        return self.dataset().to_table(columns=columns)


def _fs(path: Path | StoragePath) -> pafs.FileSystem:
    return path.fs if isinstance(path, StoragePath) else pafs.LocalFileSystem()


def _ref(file: Path | StoragePath) -> Path | str:
    """What a StagedBatch keeps of a file: its local Path, or its path on the object store."""
    return file.path if isinstance(file, StoragePath) else file


def _size(files: tuple[Path, ...] | tuple[str, ...], fs: pafs.FileSystem) -> int:
    if isinstance(fs, pafs.LocalFileSystem):
        return sum(Path(f).stat().st_size for f in files)
    return sum(info.size or 0 for info in fs.get_file_info([str(f) for f in files]))


def _dataset(files: tuple[Path, ...] | tuple[str, ...], fs: pafs.FileSystem, schema: pa.Schema | None = None) -> ds.Dataset:
    return ds.dataset([str(f) for f in files], format="parquet", schema=schema, filesystem=fs)


def stage(df: DataFrame | pa.Table, path: Path | StoragePath, *, known_empty: bool = False, collect: bool = False) -> StagedBatch:
    """Write ``df`` once (UTC microsecond timestamps) and describe the files.

    An Arrow table (from a source read without Spark) is written as one Parquet file. ``known_empty``
    (the source said no row is in bounds) skips Spark's write job: the batch is empty, with the schema
    Spark's empty Parquet file would have had. ``collect`` (the source counted a small batch) brings the
    rows through Arrow and writes them here, with that same schema, instead of running a write job.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(df, pa.Table):
        return _stage_arrow(df, path)
    plans = column_plans(df)
    if known_empty:
        path.mkdir(parents=True, exist_ok=True)
        return StagedBatch(path=path, files=(), schema=faithful_schema(spark_parquet_schema(df), plans), rows=0, bytes=0)
    if collect:
        schema = spark_parquet_schema(df)
        with _out_of_range(plans):
            collected = df.toArrow()
        table = convert_table(collected.cast(schema), plans)
        return _stage_arrow(table, path, schema=faithful_schema(schema, plans))
    with _out_of_range(plans):
        written = write_through_arrow(df, path) if isinstance(path, StoragePath) else write_observed(df, path)
    fs = _fs(path)
    files = tuple(sorted(_ref(p) for p in path.glob("*.parquet")))
    if any(plan.arrow for plan in plans.values()):
        _convert_files(files, plans, fs)
    schema = faithful_schema(_utc_schema(df, _dataset(files, fs).schema if files else None), plans)
    rows = _dataset(files, fs, schema).count_rows() if files else 0
    check_staged_rows(path, extracted=written, staged=rows)
    return StagedBatch(path=path, files=files, schema=schema, rows=rows, bytes=_size(files, fs))


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


def write_observed(df: DataFrame, path: Path, *, partition_by: str | None = None) -> int | None:
    """Write ``df`` as Parquet under ``path`` and return how many rows Spark wrote (None: not observable)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("incsync_staged")
    writer = df.observe(observation, F.count(F.lit(1)).alias("rows")).write.mode("overwrite")
    writer = writer.option("outputTimestampType", "TIMESTAMP_MICROS")
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


def stage_by_tenant(
    df: DataFrame, path: Path | StoragePath, column: str, *, known_empty: bool = False, collect: bool = False
) -> tuple[pa.Schema, dict[str, StagedBatch]]:
    """Stage a fan-out read once, split by the tenant column's text: the schema, and a batch per tenant value.

    Spark writes the split itself (``partitionBy`` on a text copy of the column, so the files keep the
    column as it was); a small read collected through Arrow is split here. Every later step reads only
    its tenant's files.
    """
    path.mkdir(parents=True, exist_ok=True)
    plans = column_plans(df)
    if known_empty:
        return faithful_schema(spark_parquet_schema(df), plans), {}
    if collect:
        spark_schema = spark_parquet_schema(df)
        with _out_of_range(plans):
            collected = df.toArrow()
        table = convert_table(collected.cast(spark_schema), plans)
        schema = faithful_schema(spark_schema, plans)
        text = pc.cast(table[column], pa.string())
        return schema, {
            str(value): _stage_arrow(table.filter(pc.equal(text, value)), path / f"t{i:05d}", schema=schema)
            for i, value in enumerate(pc.unique(text).to_pylist())
        }
    from pyspark.sql import functions as F

    tagged = df.withColumn(TENANT_PARTITION, F.col(column).cast("string"))
    with _out_of_range(plans):
        if isinstance(path, StoragePath):
            written = write_through_arrow(tagged, path, partition_by=TENANT_PARTITION)
        else:
            written = write_observed(tagged, path, partition_by=TENANT_PARTITION)
    fs = _fs(path)
    folders = sorted((p for p in path.glob(f"{TENANT_PARTITION}=*") if p.is_dir()), key=str)
    files = {f: tuple(sorted(_ref(p) for p in f.glob("*.parquet"))) for f in folders}
    if any(plan.arrow for plan in plans.values()):
        _convert_files(tuple(f for parts in files.values() for f in parts), plans, fs)
    first = next((parts[0] for parts in files.values() if parts), None)
    schema = faithful_schema(_utc_schema(df, _dataset((first,), fs).schema if first else None), plans)
    batches = {}
    for folder, parts in files.items():
        rows = _dataset(parts, fs, schema).count_rows() if parts else 0
        value = unquote(folder.name.split("=", 1)[1])  # Spark escapes path characters as %XX
        batches[value] = StagedBatch(path=folder, files=parts, schema=schema, rows=rows, bytes=_size(parts, fs))
    check_staged_rows(path, extracted=written, staged=sum(b.rows for b in batches.values()))
    return schema, batches


@contextmanager
def _out_of_range(plans: dict[str, ColumnPlan]) -> Iterator[None]:
    """Spark's reader overflows on dates it cannot hold (PostgreSQL 'infinity'): say which columns may hold one."""
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
                f"(key {key}), which no date or timestamp type outside PostgreSQL holds; nothing was published. "
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


def _convert_files(files: tuple[Path, ...] | tuple[str, ...], plans: dict[str, ColumnPlan], fs: pafs.FileSystem) -> None:
    """Rewrite Spark's files with the planned Arrow types (only batches that have such columns pay this)."""
    import pyarrow.parquet as pq

    for file in files:
        table = convert_table(pq.read_table(str(file), filesystem=fs), plans).replace_schema_metadata(None)  # Spark's schema is stale
        pq.write_table(table, str(file), coerce_timestamps="us", filesystem=fs)


def _stage_arrow(table: pa.Table, path: Path | StoragePath, *, schema: pa.Schema | None = None) -> StagedBatch:
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    fs = _fs(path)
    files: tuple[Path, ...] | tuple[str, ...] = ()
    if table.num_rows:
        file = _ref(path / "part-00000.parquet")
        pq.write_table(table, str(file), coerce_timestamps="us", filesystem=fs)
        files = (file,)  # type: ignore[assignment]
    schema = (schema or table.schema).remove_metadata()
    return StagedBatch(path=path, files=files, schema=schema, rows=table.num_rows, bytes=_size(files, fs))


def last_modified_micros(batch: StagedBatch, column: str) -> np.ndarray:
    """The batch's last-modified values as int64 microseconds since the epoch (validated non-null)."""
    if batch.rows == 0:
        return np.zeros(0, dtype=np.int64)
    values = batch.table(columns=[column])[column]
    return pc.cast(pc.cast(values, pa.timestamp("us", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False)


def filtered_batch(batch: StagedBatch, path: Path | StoragePath, where: ds.Expression | None) -> StagedBatch:
    """The staged rows matching ``where`` (None: all), as a batch of its own in ``path`` (same schema)."""
    table = batch.dataset().to_table(filter=where) if batch.rows else batch.schema.empty_table()
    return _stage_arrow(table, path, schema=batch.schema)


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


def _utc_schema(df: DataFrame, file_schema: pa.Schema | None) -> pa.Schema:
    if file_schema is not None:
        return file_schema.remove_metadata()
    return spark_parquet_schema(df)


def spark_parquet_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of the Parquet files Spark writes for ``df``: UTC timestamps, Spark's nullability."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in to_arrow_schema(df.schema, timezone="UTC")])


def remove(path: Path | StoragePath) -> None:
    if isinstance(path, StoragePath):
        path.rmtree()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _lock_file(path: Path | StoragePath) -> Path:
    if isinstance(path, StoragePath):
        return path.lock_file()  # object stores have no locks: a file in this host's temporary folder
    return path.with_name(path.name + ".lock")  # beside the folder: Spark's overwrite empties the folder


@contextmanager
def claim(path: Path | StoragePath) -> Iterator[None]:
    """Hold ``<path>.lock`` while a transfer uses its staging folder; remove both on the way out.

    The OS drops the lock when the process dies, which is how ``remove_if_abandoned`` tells a dead
    transfer's folder from a live one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_file(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            remove(path)
            lock.unlink(missing_ok=True)


def remove_if_abandoned(path: Path | StoragePath) -> bool:
    """Remove a staging folder whose transfer no longer holds its lock; False when it is in use.

    A folder on an object store is removed only by the host whose transfer made it (its lock file is
    local); other hosts' leftovers are for the bucket's lifecycle rules (docs/storage.md).
    """
    lock = _lock_file(path)
    if isinstance(path, StoragePath) and not lock.exists():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        remove(path)
        lock.unlink(missing_ok=True)
    return True


@dataclass(frozen=True)
class BatchFacts:
    """What validation learns on the way: counts and the batch's greatest last-modified."""

    rows: int
    delta_rows: int
    max_last_modified: datetime | None


def _keys_text(table: pa.Table, pk: list[str]) -> str:
    rows = table.select(pk).slice(0, MAX_REPORTED_KEYS).to_pylist()
    return ", ".join("(" + ", ".join(repr(r[c]) for c in pk) + ")" for r in rows)


def _refuse_null_last_modified(keys: pa.Table, *, model: ModelConfig, where: str) -> None:
    pk, lm = list(model.primary_key), model.last_modified_column
    null_lm = keys.filter(pc.is_null(keys[lm]))
    if null_lm.num_rows:
        raise ValidationError(
            f"{where}: {null_lm.num_rows} row(s) have a NULL last-modified column {lm} "
            f"(keys {_keys_text(null_lm, pk)}); nothing was published. Fix the source rows or the model."
        )


def check_last_modified(batch: StagedBatch, *, model: ModelConfig, recipient_id: str) -> None:
    """Refuse a batch holding NULL last-modified rows: such a row fits no window and no commit."""
    if batch.rows:
        keys = batch.table(columns=list(dict.fromkeys([*model.primary_key, model.last_modified_column])))
        _refuse_null_last_modified(keys, model=model, where=f"model {model.model_name}, recipient {recipient_id}")


def validate_and_count(
    batch: StagedBatch, *, model: ModelConfig, recipient_id: str, delta_threshold: datetime | None
) -> BatchFacts:
    """Primary key non-null and unique, last-modified non-null; then the counts (DESIGN step 5-6)."""
    pk, lm = list(model.primary_key), model.last_modified_column
    where = f"model {model.model_name}, recipient {recipient_id}"
    missing = [c for c in [*pk, lm] if c not in batch.schema.names]
    if missing:
        raise ValidationError(f"{where}: staged batch lacks columns {missing}; fix the model's primary_key/last_modified_column")
    if batch.rows == 0:
        return BatchFacts(rows=0, delta_rows=0, max_last_modified=None)
    keys = batch.table(columns=list(dict.fromkeys([*pk, lm])))

    # or_kleene takes two arguments: fold it over keys of any width.
    null_pk = keys.filter(functools.reduce(pc.or_kleene, [pc.is_null(keys[c]) for c in pk]))
    if null_pk.num_rows:
        raise ValidationError(
            f"{where}: {null_pk.num_rows} row(s) have a NULL primary key {pk} (e.g. {_keys_text(null_pk, pk)}); "
            "nothing was published. Fix the source rows or the model's primary_key."
        )
    _refuse_null_last_modified(keys, model=model, where=where)
    counts = keys.group_by(pk).aggregate([([], "count_all")])
    dupes = counts.filter(pc.greater(counts["count_all"], 1))
    if dupes.num_rows:
        raise ValidationError(
            f"{where}: {dupes.num_rows} primary key value(s) {pk} occur more than once in the batch: "
            f"{_keys_text(dupes.sort_by([(c, 'ascending') for c in pk]), pk)}; nothing was published. "
            "Fix the source or choose a primary_key that is unique."
        )
    lm_values = keys[lm]
    delta = keys.num_rows if delta_threshold is None else pc.sum(pc.greater(lm_values, pa.scalar(delta_threshold, lm_values.type))).as_py() or 0
    return BatchFacts(rows=keys.num_rows, delta_rows=int(delta), max_last_modified=pc.max(lm_values).as_py())

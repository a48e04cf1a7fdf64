"""Lake source: folders of Parquet/CSV/JSON files or Spark catalog tables, filtered at the scan.

A lake on an object store (``s3://``, ``gs://``, ``abfss://``) is read by pyarrow through incsync's storage
layer, not by Spark: Spark reaches object stores only with the Hadoop connector jars (hadoop-aws, ...),
which this installation lacks. pyarrow scans the Parquet files with the tenant and a widened
last-modified range pushed down, and hands the rows to Spark, which applies the exact bounds; so the rows
in bounds must fit in the driver's memory, and CSV/JSON files and ``source_query`` need the connector.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.config.sources import LakeSourceConfig
from incsync.core.bounds import Bounds
from incsync.core.sql_text import pasted_query, split_qualified
from incsync.errors import SchemaError, SourceError
from incsync.sources.base import Source, column, envelope, normalize_last_modified, select_columns
from incsync.storage.names import is_url, local_path, scheme_of

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession

_READER_DEFAULTS = {"csv": {"header": "true", "inferSchema": "true"}, "json": {}, "parquet": {}}


class LakeSource(Source):
    """Tables are folders ``<path>/<table>`` (schema tenancy: ``<path>/<schema>/<table>``)."""

    vendor = "lake"
    supports_fan_out = True

    def __init__(self, config: LakeSourceConfig) -> None:
        self.config = config

    @property
    def remote(self) -> bool:
        return is_url(self.config.path)

    def _remote_folder(self, parts: list[str]) -> tuple[object, str]:
        """The filesystem and path of a table folder on an object store; refuses what needs Spark's connector."""
        from incsync.storage.filesystems import filesystem, resolve_options

        cfg = self.config
        if cfg.format != "parquet":
            raise SourceError(
                f"source {cfg.name}: {cfg.format} files on {scheme_of(str(cfg.path))}:// are read by Spark, which needs the "
                "Hadoop connector jars (hadoop-aws, ...) that this installation lacks; store the tables as Parquet "
                "(read through pyarrow) or register them in Spark's catalog (format: table)"
            )
        fs, root = filesystem(str(cfg.path), resolve_options(cfg.storage_options, f"sources[{cfg.name}].storage_options"))
        return fs, "/".join([root, *parts])

    def _remote_dataset(self, parts: list[str]) -> ds.Dataset:
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs

        fs, folder = self._remote_folder(parts)
        if fs.get_file_info(folder).type != pafs.FileType.Directory:  # type: ignore[attr-defined]  # pyarrow's FileSystem has get_file_info; its stubs do not say so
            raise SourceError(
                f"source {self.config.name}: table folder {self.config.path.rstrip('/')}/{'/'.join(parts)} does not exist; "
                "check `path` and the table name"
            )
        return ds.dataset(folder, filesystem=fs, format="parquet", partitioning="hive")

    def _remote_table(self, spark: SparkSession, parts: list[str], where: ds.Expression | None) -> DataFrame:
        """The rows matching ``where``, read by pyarrow and handed to Spark (see the module docstring)."""
        table = self._remote_dataset(parts).to_table(filter=where)
        return spark.createDataFrame(table)

    def _table(self, spark: SparkSession, parts: list[str], where: ds.Expression | None = None) -> DataFrame:
        cfg = self.config
        if cfg.format == "table":
            return spark.table(".".join(parts))
        if self.remote:
            return self._remote_table(spark, parts, where)
        folder = Path(local_path(cfg.path or ".")).joinpath(*parts)
        if not folder.exists():
            raise SourceError(f'source {cfg.name}: table folder {folder} does not exist; check `path` and the table name')
        options = {**_READER_DEFAULTS[cfg.format], **cfg.options}
        return spark.read.format(cfg.format).options(**options).load(str(folder))

    def _check_parquet_types(self, spark: SparkSession, model: ModelConfig, parts: list[str]) -> None:
        """Parquet types Spark cannot read fail here, naming the column and the fix, not in Spark's words."""
        cfg = self.config
        local = Path(local_path(cfg.path or "."))
        folder = f"{cfg.path.rstrip('/')}/{'/'.join(parts)}" if self.remote else local.joinpath(*parts)
        if cfg.format != "parquet" or (not self.remote and not Path(folder).is_dir()):
            return
        import pyarrow as pa
        import pyarrow.dataset as ds

        try:
            schema = self._remote_dataset(parts).schema if self.remote else ds.dataset(
                str(folder), format="parquet", exclude_invalid_files=False).schema
        except (pa.ArrowInvalid, OSError):
            return  # Spark reports unreadable files itself
        time_type = spark.conf.get("spark.sql.timeType.enabled", "false").lower() == "true"
        wanted = set(model.columns) if model.columns else None
        for field in schema:
            if wanted is not None and field.name not in wanted:
                continue
            t = field.type
            fix = None
            if pa.types.is_decimal(t) and t.precision > 38:
                fix = "Spark reads decimals of up to 38 digits: write it as decimal(38,s) or lower, or as its exact text (string)"
            elif pa.types.is_time(t) and not time_type:
                fix = 'set `spark: {"spark.sql.timeType.enabled": "true"}` in the config, or write it as a string'
            elif pa.types.is_timestamp(t) and t.unit == "ns":
                fix = "write it as timestamp[us] (Parquet TIMESTAMP(MICROS)); Spark keeps microseconds"
            elif pa.types.is_float16(t):
                fix = "write it as float32"
            if fix:
                raise SchemaError(
                    f'model {model.model_name}: column "{field.name}" of lake table {folder} has Parquet type {t}, '
                    f"which Spark cannot read; {fix}"
                )

    def _register_views(self, spark: SparkSession, schema: str | None) -> None:
        """Expose every table folder as a temp view so a ``source_query`` can name it."""
        if self.config.format == "table":
            if schema:
                spark.catalog.setCurrentDatabase(schema)
            return
        if self.remote:
            raise SourceError(
                f"source {self.config.name}: a source_query over {scheme_of(str(self.config.path))}:// tables needs Spark to "
                "read them, which needs the Hadoop connector jars (hadoop-aws, ...) that this installation lacks; "
                "name the table with `source_table`, or register the tables in Spark's catalog (format: table)"
            )
        root = Path(local_path(self.config.path or ".")) / (schema or "")
        if not root.is_dir():
            raise SourceError(f"source {self.config.name}: folder {root} does not exist; check `path`")
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            self._table(spark, [*([schema] if schema else []), folder.name]).createOrReplaceTempView(folder.name)

    def _frame(
        self, spark: SparkSession, model: ModelConfig, recipient: RecipientConfig,
        prefilter: tuple[list[str], Bounds] | None = None,
    ) -> DataFrame:
        """The model's relation for ``recipient`` (its schema, if schema-tenanted), before any exact filter.

        ``prefilter`` (tenant values and bounds) is pushed into a pyarrow scan of an object store; Spark
        applies the exact filters after it either way.
        """
        schema = recipient.id_in_provider_system if model.tenancy == "schema" else None
        if model.source_query is not None:
            self._register_views(spark, schema)
            # Wrapped, never edited; the tenant value is a bind parameter.
            df = spark.sql(f"WITH q AS ({pasted_query(model.source_query, vendor='lake')}\n) SELECT * FROM q")
        else:
            assert model.source_table is not None
            parts = [*([schema] if schema else []), *(split_qualified(model.source_table) or [model.source_table])]
            self._check_parquet_types(spark, model, parts)
            where = self._pushdown(model, parts, *prefilter) if self.remote and prefilter else None
            df = self._table(spark, parts, where)
        if model.organization_column and model.organization_column not in df.columns:
            raise SourceError(
                f'model {model.model_name}: organization_column "{model.organization_column}" is not in the source; '
                "fix `organization_column`"
            )
        return df

    def read(
        self, spark: SparkSession, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds,
        rows_hint: int | None = None,
    ) -> DataFrame:
        from pyspark.sql import functions as F

        df = self._frame(spark, model, recipient, ([recipient.id_in_provider_system], bounds))
        if model.organization_column:
            df = df.where(column(model.organization_column) == F.lit(recipient.id_in_provider_system))
        df = normalize_last_modified(df, model=model, recipient=recipient, bounds=bounds)
        return select_columns(df, model)

    def read_many(
        self, spark: SparkSession, *, model: ModelConfig, targets: Sequence[tuple[RecipientConfig, Bounds]],
        rows_hint: int | None = None,
    ) -> DataFrame:
        """Every target tenant in one scan, within the targets' envelope; exact bounds are applied per recipient."""

        anyone = targets[0][0]
        values = sorted({r.id_in_provider_system for r, _ in targets})
        df = self._frame(spark, model, anyone, (values, envelope(targets)))
        assert model.organization_column is not None
        df = df.where(column(model.organization_column).cast("string").isin(values))
        df = normalize_last_modified(df, model=model, recipient=anyone, bounds=envelope(targets))
        return select_columns(df, model)

    def _pushdown(self, model: ModelConfig, parts: list[str], values: list[str], bounds: Bounds) -> ds.Expression | None:
        """The tenant values and the bounds (a day wider for zone-less timestamps, NULLs kept for validation)
        as a pyarrow filter; None where a column is missing or not a timestamp (Spark's checks then say why)."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        schema = self._remote_dataset(parts).schema
        where = None
        org = model.organization_column
        if org and org in schema.names and model.tenancy == "column":
            where = ds.field(org).cast(pa.string()).isin(values)
        lm = model.last_modified_column
        kind = schema.field(lm).type if lm in schema.names else None
        if kind is not None and pa.types.is_timestamp(kind):
            lower, upper = bounds.lower, bounds.upper
            if kind.tz is None:
                lower, upper = (lower - timedelta(days=1)).replace(tzinfo=None), (upper + timedelta(days=1)).replace(tzinfo=None)
            field = ds.field(lm)
            within = (field >= pa.scalar(lower, kind)) & (field < pa.scalar(upper, kind)) | field.is_null()
            where = within if where is None else where & within
        return where

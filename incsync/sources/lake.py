"""Lake source: folders of Parquet/CSV/JSON files or Spark catalog tables, filtered at the scan."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.changes import Bounds
from incsync.config import LakeSourceConfig, ModelConfig, RecipientConfig
from incsync.errors import SourceError
from incsync.sources.base import Source, envelope, normalize_last_modified, select_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_READER_DEFAULTS = {"csv": {"header": "true", "inferSchema": "true"}, "json": {}, "parquet": {}}


class LakeSource(Source):
    """Tables are folders ``<path>/<table>`` (schema tenancy: ``<path>/<schema>/<table>``)."""

    vendor = "lake"
    supports_fan_out = True

    def __init__(self, config: LakeSourceConfig):
        self.config = config

    def _table(self, spark: SparkSession, parts: list[str]) -> DataFrame:
        cfg = self.config
        if cfg.format == "table":
            return spark.table(".".join(parts))
        folder = Path(cfg.path or ".").joinpath(*parts)
        if not folder.exists():
            raise SourceError(f'source {cfg.name}: table folder {folder} does not exist; check `path` and the table name')
        options = {**_READER_DEFAULTS[cfg.format], **cfg.options}
        return spark.read.format(cfg.format).options(**options).load(str(folder))

    def _register_views(self, spark: SparkSession, schema: str | None) -> None:
        """Expose every table folder as a temp view so a ``source_query`` can name it."""
        if self.config.format == "table":
            if schema:
                spark.catalog.setCurrentDatabase(schema)
            return
        root = Path(self.config.path or ".") / (schema or "")
        if not root.is_dir():
            raise SourceError(f"source {self.config.name}: folder {root} does not exist; check `path`")
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            self._table(spark, [*([schema] if schema else []), folder.name]).createOrReplaceTempView(folder.name)

    def _frame(self, spark: SparkSession, model: ModelConfig, recipient: RecipientConfig) -> DataFrame:
        """The model's relation for ``recipient`` (its schema, if schema-tenanted), before any filter."""
        schema = recipient.id_in_provider_system if model.tenancy == "schema" else None
        if model.source_query is not None:
            self._register_views(spark, schema)
            # Wrapped, never edited; the tenant value is a bind parameter.
            df = spark.sql(f"WITH q AS ({model.source_query}) SELECT * FROM q")
        else:
            assert model.source_table is not None
            df = self._table(spark, [*([schema] if schema else []), *model.source_table.split(".")])
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

        df = self._frame(spark, model, recipient)
        if model.organization_column:
            df = df.where(F.col(model.organization_column) == F.lit(recipient.id_in_provider_system))
        df = normalize_last_modified(df, model=model, recipient=recipient, bounds=bounds)
        return select_columns(df, model)

    def read_many(
        self, spark: SparkSession, *, model: ModelConfig, targets: Sequence[tuple[RecipientConfig, Bounds]],
        rows_hint: int | None = None,
    ) -> DataFrame:
        """Every target tenant in one scan, within the targets' envelope; exact bounds are applied per recipient."""
        from pyspark.sql import functions as F

        anyone = targets[0][0]
        df = self._frame(spark, model, anyone)
        assert model.organization_column is not None
        values = sorted({r.id_in_provider_system for r, _ in targets})
        df = df.where(F.col(model.organization_column).cast("string").isin(values))
        df = normalize_last_modified(df, model=model, recipient=anyone, bounds=envelope(targets))
        return select_columns(df, model)

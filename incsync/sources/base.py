"""What every source does: read one recipient's rows of one model within bounds, pushed down."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.bounds import UTC, Bounds
from incsync.core.horizon import LOOKBACK_ONLY, SourceHorizon
from incsync.errors import SchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Source(ABC):
    """A source of one vendor; ``read`` returns a lazy DataFrame whose predicate the source runs."""

    vendor: str
    # True when ``read_many`` reads several recipients of a column-tenanted model in one query.
    supports_fan_out: bool = False

    @abstractmethod
    def read(
        self, spark: SparkSession, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds,
        rows_hint: int | None = None,
    ) -> DataFrame:
        """Rows of ``recipient`` with ``bounds.lower <= last_modified < bounds.upper``.

        ``rows_hint``: the source's own ``count_rows`` answer, when there was one (it may plan by it).
        """

    def count_rows(self, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds, cap: int) -> int | None:
        """An upper bound on the rows ``read`` returns, counted up to ``cap + 1`` and asked of the source
        without Spark; None: cannot tell cheaply.

        The answer must never be below the read's count (0 makes the transfer skip Spark's staging job;
        up to ``cap`` makes it collect the rows through Arrow instead of a Parquet write job).
        """
        return None

    def read_many(
        self, spark: SparkSession, *, model: ModelConfig, targets: Sequence[tuple[RecipientConfig, Bounds]],
        rows_hint: int | None = None,
    ) -> DataFrame:
        """Rows of every target recipient within its own bounds, in one pushed-down read (fan-out).

        Rows of other tenants never come back; the caller splits by tenant and applies exact bounds.
        """
        raise NotImplementedError(f"source vendor {self.vendor} reads one recipient at a time")

    def count_rows_many(self, *, model: ModelConfig, targets: Sequence[tuple[RecipientConfig, Bounds]], cap: int) -> int | None:
        """``count_rows`` for a fan-out read: an upper bound, or None when it cannot tell cheaply."""
        return None

    def horizon(self, spark: Callable[[], SparkSession], *, model: ModelConfig, recipient: RecipientConfig) -> SourceHorizon:
        """The extraction's start and the safe horizon, by the source's clock, taken just before extraction.

        Default (lake sources): no transactions to see, so the lookback alone covers late rows; the
        extraction's start is this machine's clock, so rows dated in the future cannot move the HW past it.
        """
        return SourceHorizon(extraction_start=datetime.now(UTC), mode=LOOKBACK_ONLY)

    def check(self, spark: SparkSession, *, model: ModelConfig, recipient: RecipientConfig) -> None:
        """Raise SourceError/SchemaError when the model cannot be read (default: read zero rows)."""
        self.read(spark, model=model, recipient=recipient, bounds=_nothing()).limit(0).collect()


def _nothing() -> Bounds:
    from incsync.core.bounds import EPOCH

    return Bounds(lower=EPOCH, upper=EPOCH, lookback_seconds=0, reason="check")


def column(name: str):  # noqa: ANN201 - a pyspark Column; pyspark is imported lazily
    """A Spark column by its exact name: dots, spaces and backquotes in it are part of the name."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def normalize_last_modified(df: DataFrame, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds) -> DataFrame:
    """Make the last-modified column a UTC timestamp and apply the bounds to it.

    A zone-less column is rejected unless the model names its zone; then the pushed-down prefilter is
    widened by a day on each side (offsets and DST) and the exact bounds are applied after conversion.
    Rows whose last-modified is NULL pass the filter so that validation rejects the batch (a NULL row
    fits no window and would otherwise never be transferred, silently).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    lm = model.last_modified_column
    fields = {f.name: f.dataType for f in df.schema.fields}
    if lm not in fields:
        raise SchemaError(
            f'model {model.model_name}: last_modified_column "{lm}" is not in the source '
            f"(columns: {', '.join(fields)}); fix `last_modified_column` or `columns`"
        )
    kind = fields[lm]
    # NULL last-modified rows are extracted on purpose: validation then fails the transfer naming their
    # keys, instead of the bounds predicate hiding them from every transfer forever.
    def within(lower: object, upper: object) -> object:
        return ((column(lm) >= lower) & (column(lm) < upper)) | column(lm).isNull()

    if isinstance(kind, TimestampType):
        return df.where(within(F.lit(bounds.lower), F.lit(bounds.upper)))
    if isinstance(kind, TimestampNTZType):
        if not model.last_modified_timezone:
            raise SchemaError(
                f'model {model.model_name}: last_modified_column "{lm}" is a timestamp without time zone; '
                "declare the zone it is written in with `last_modified_timezone` (e.g. UTC, Europe/Berlin)"
            )
        day = timedelta(days=1)
        naive_lower = (bounds.lower - day).replace(tzinfo=None)
        naive_upper = (bounds.upper + day).replace(tzinfo=None)
        pre = df.where(within(F.lit(naive_lower).cast("timestamp_ntz"), F.lit(naive_upper).cast("timestamp_ntz")))
        converted = pre.withColumn(lm, F.to_utc_timestamp(column(lm).cast("timestamp"), model.last_modified_timezone))
        return converted.where(within(F.lit(bounds.lower), F.lit(bounds.upper)))
    raise SchemaError(
        f'model {model.model_name}: last_modified_column "{lm}" has type {kind.simpleString()}; it must be a '
        "timestamp (for CSV/JSON sources set the reader option timestampFormat, or cast it in a source_query)"
    )


def envelope(targets: Sequence[tuple[RecipientConfig, Bounds]]) -> Bounds:
    """The smallest bounds holding every target's bounds (the exact per-target bounds are applied later)."""
    lower = min(b.lower for _, b in targets)
    upper = max(b.upper for _, b in targets)
    return Bounds(lower=lower, upper=upper, lookback_seconds=max(b.lookback_seconds for _, b in targets), reason="fan_out")


def select_columns(df: DataFrame, model: ModelConfig) -> DataFrame:
    if not model.columns:
        return df
    present = set(df.columns)
    missing = [c for c in model.columns if c not in present]
    if missing:
        raise SchemaError(
            f"model {model.model_name}: columns {missing} are not in the source "
            f"(it has: {', '.join(df.columns)}); fix `columns`"
        )
    return df.select(*[column(c) for c in model.columns])

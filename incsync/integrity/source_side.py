"""The source's half of verify: per-bucket fingerprints computed by the database (or Spark, for lakes),
and the rows of the buckets that differ, read through the transfer's own path (so they are typed
exactly as a transfer stages them)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.bounds import EPOCH, UTC, Bounds
from incsync.core.canonical import (
    Fingerprints,
    Kind,
    kind_from_pg,
    kind_from_spark,
    spark_hash,
    spark_key_bucket,
    spark_text,
    sql_hash,
    sql_key_bucket,
    sql_text,
)
from incsync.sources.base import Source, column
from incsync.staging.batch import StagedBatch
from incsync.staging.spark import stage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FAR_FUTURE = datetime(9000, 1, 1, tzinfo=UTC)
EVERYTHING = Bounds(lower=EPOCH, upper=FAR_FUTURE, lookback_seconds=0, reason="verify")


class SourceSide:
    """One recipient's rows of one model at its source."""

    def __init__(self, source: Source, *, model: ModelConfig, recipient: RecipientConfig, spark: Callable[[], SparkSession]) -> None:
        self.source, self.model, self.recipient, self.spark = source, model, recipient, spark
        self.vendor = source.vendor
        self._pg = None
        if self.vendor == "postgres":
            from incsync.core.vendor_sql import postgres_target

            self._pg = postgres_target(source.config.jdbc_url)
        self.reads = 0  # queries that scanned the recipient's rows (the cost figure counts them)

    @property
    def is_jdbc(self) -> bool:
        return self.vendor != "lake"

    def _pg_conn(self):  # noqa: ANN202 - a psycopg connection context
        return self.source.pg_connect(self._pg, self.source.schema_of(self.model, self.recipient))

    def columns(self) -> dict[str, Kind]:
        """Column -> kind, as the model reads them (its ``columns``, else all)."""
        if self._pg is not None:
            relation = self.source.relation_sql(self.model, self.recipient, bounds_where=None)
            with self._pg_conn() as conn:
                cur = conn.execute(f"SELECT * FROM ({relation}) q LIMIT 0")
                oids = [d.type_code for d in cur.description]
                names = dict(conn.execute("SELECT oid::int, typname FROM pg_type WHERE oid = ANY(%s)", [oids]).fetchall())
                return {d.name: kind_from_pg(names.get(d.type_code, "")) for d in cur.description}
        if self.is_jdbc:
            schema = self.source.probe_schema(self.spark(), self.model, self.recipient)
            return {f.name: kind_from_spark(f.dataType) for f in schema.fields}
        df = self.source.read(self.spark(), model=self.model, recipient=self.recipient, bounds=EVERYTHING)
        return {f.name: kind_from_spark(f.dataType) for f in df.schema.fields}

    def fingerprints(
        self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int, start: datetime, hw: datetime | None,
        native: bool = False,
    ) -> Fingerprints:
        """One pass over the recipient's rows from ``start`` on: in scope up to ``hw`` (inclusive), pending after.
        ``native``: the destination is PostgreSQL too (see ``sql_hash``)."""
        self.reads += 1
        if not self.is_jdbc:
            return self._spark_fingerprints(kinds, compared, buckets=buckets, checked=checked, start=start, hw=hw)
        d = self.source.dialect
        lm = d.ident(self.model.last_modified_column)
        zoned = True  # PostgreSQL sessions run in UTC; MariaDB compares the literal in its session zone, UTC
        vendor = "postgres" if self.vendor == "postgres" else "mysql"
        key = [(d.ident(c), kinds[c]) for c in self.model.primary_key]
        row = sql_text(vendor, [(d.ident(c), kinds[c]) for c in compared])
        relation = self.source.relation_sql(self.model, self.recipient, bounds_where=None)
        hw_sql = d.timestamp(hw, zoned=zoned) if hw is not None else None
        in_scope = f"incsync_lm <= {hw_sql}" if hw_sql else "1=0"
        exact = ""
        if vendor == "mysql" and self.model.organization_column:
            exact = f" AND BINARY {d.ident(self.model.organization_column)} = BINARY {d.literal(self.recipient.id_in_provider_system)}"
        sql = (
            f"SELECT incsync_b, SUM(CASE WHEN {in_scope} THEN 1 ELSE 0 END) AS n, "
            f"CAST(SUM(CASE WHEN {in_scope} THEN incsync_h ELSE 0 END) AS {'text' if vendor == 'postgres' else 'CHAR'}) AS s, "
            f"SUM(CASE WHEN {in_scope} THEN 0 ELSE 1 END) AS p "
            f"FROM (SELECT {sql_key_bucket(vendor, key, buckets)} AS incsync_b, "
            f"{sql_hash(vendor, row, native=native)} AS incsync_h, {lm} AS incsync_lm "
            f"FROM ({relation}) r WHERE {lm} >= {d.timestamp(start, zoned=zoned)}{exact}) x "
            f"WHERE incsync_b < {checked} GROUP BY incsync_b"
        )
        out = Fingerprints()
        for b, n, s, p in self._query(sql):
            out.add(int(b), int(n), int(s), int(p))
        return out

    def pending_keys(self, kinds: dict[str, Kind], *, start: datetime, hw: datetime | None, limit: int) -> set[str] | None:
        """The canonical key text of the rows newer than the HW (changes no transfer has read yet), or None
        when there are more than ``limit``. The destination leaves these keys out of its fingerprints, so a
        change waiting for the next transfer does not make its bucket differ. JDBC: one indexed range read."""
        if hw is None:
            return None
        if not self.is_jdbc:
            from pyspark.sql import functions as F

            df = self.source.read(self.spark(), model=self.model, recipient=self.recipient, bounds=Bounds(
                lower=start, upper=FAR_FUTURE, lookback_seconds=0, reason="verify"))
            key = spark_text([(column(c), kinds[c]) for c in self.model.primary_key])
            rows = df.where(column(self.model.last_modified_column) > F.lit(hw)).select(key.alias("k")).limit(limit + 1).collect()
            keys = [r["k"] for r in rows]
        else:
            d = self.source.dialect
            vendor = "postgres" if self.vendor == "postgres" else "mysql"
            lm = d.ident(self.model.last_modified_column)
            key = sql_text(vendor, [(d.ident(c), kinds[c]) for c in self.model.primary_key])
            relation = self.source.relation_sql(self.model, self.recipient, bounds_where=(
                f"{lm} > {d.timestamp(hw, zoned=True)} AND {lm} >= {d.timestamp(start, zoned=True)}"))
            keys = [r[0] for r in self._query(f"SELECT {key} AS k FROM ({relation}) r LIMIT {limit + 1}")]
        return None if len(keys) > limit else set(keys)

    def _query(self, sql: str) -> list[tuple]:
        if self._pg is not None:
            with self._pg_conn() as conn:
                return conn.execute(sql).fetchall()
        options = self.source.jdbc_options(self.model, self.recipient)
        what = f"verify of model {self.model.model_name}, recipient {self.recipient.id}"
        df = self.source.load_query(self.spark(), sql, options, what=what)
        return [tuple(r) for r in df.collect()]

    def _spark_fingerprints(
        self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int, start: datetime, hw: datetime | None,
    ) -> Fingerprints:
        from pyspark.sql import functions as F

        df = self.source.read(self.spark(), model=self.model, recipient=self.recipient, bounds=Bounds(
            lower=start, upper=FAR_FUTURE, lookback_seconds=0, reason="verify"))
        lm = column(self.model.last_modified_column)
        df = df.where(lm.isNotNull())
        key = [(column(c), kinds[c]) for c in self.model.primary_key]
        row = spark_text([(column(c), kinds[c]) for c in compared])
        scoped = lm <= F.lit(hw) if hw is not None else F.lit(False)
        framed = df.select(spark_key_bucket(key, buckets).alias("b"), spark_hash(row).alias("h"), scoped.alias("in_scope"))
        grouped = framed.where(F.col("b") < checked).groupBy("b").agg(
            F.sum(F.when(F.col("in_scope"), 1).otherwise(0)).alias("n"),
            F.sum(F.when(F.col("in_scope"), F.col("h")).otherwise(0)).cast("string").alias("s"),
            F.sum(F.when(F.col("in_scope"), 0).otherwise(1)).alias("p"),
        )
        out = Fingerprints()
        for r in grouped.collect():
            out.add(int(r["b"]), int(r["n"]), int(r["s"]), int(r["p"]))
        return out

    def rows(self, kinds: dict[str, Kind], *, buckets: int, which: list[int], path: Path) -> StagedBatch:
        """Every row (any last-modified) of the recipient in the buckets ``which``, staged as a transfer stages."""
        self.reads += 1
        spark = self.spark()
        df: DataFrame
        if self.is_jdbc:
            d = self.source.dialect
            vendor = "postgres" if self.vendor == "postgres" else "mysql"
            key = [(d.ident(c), kinds[c]) for c in self.model.primary_key]
            where = f"{sql_key_bucket(vendor, key, buckets)} IN ({', '.join(str(b) for b in which)})"
            df = self.source.read(spark, model=self.model, recipient=self.recipient, bounds=EVERYTHING, where=where)  # type: ignore[call-arg]  # the lake and JDBC sources take where=; the base protocol does not name it
        else:
            df = self.source.read(spark, model=self.model, recipient=self.recipient, bounds=EVERYTHING)
            key = [(column(c), kinds[c]) for c in self.model.primary_key]
            df = df.where(spark_key_bucket(key, buckets).isin(which))
        return stage(df, path, collect=True)


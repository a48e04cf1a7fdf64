"""Database sources over Spark JDBC: PostgreSQL and MySQL/MariaDB, the whole predicate in the database.

Tenant and bounds are written into the query (see ``jdbc_sql`` for the vendor-safe literals); bounds
are formatted by us from UTC datetimes. Spark's own filters are not pushed down
(``pushDownPredicate=false``): its timestamp literals follow the JVM's default zone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.bounds import Bounds
from incsync.core.horizon import SourceHorizon
from incsync.core.sql_text import pasted_query, split_qualified
from incsync.core.vendor_sql import bounds_predicate, fan_out_predicate, postgres_literal, postgres_target
from incsync.errors import ConfigError, SchemaError
from incsync.sources.base import Source, column, envelope, normalize_last_modified, select_columns
from incsync.sources.jdbc.connect import JdbcConnection
from incsync.sources.jdbc.shape import kept_schema
from incsync.sources.jdbc.types import catalog_sql, plan_columns, select_list, with_plan_metadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from incsync.core.typemap import ColumnPlan

log = logging.getLogger(__name__)

_NUMERIC_KEYS = ("IntegerType", "LongType", "ShortType", "ByteType", "DecimalType")


PARTITIONED_READ_MIN_ROWS = 50_000  # at most the transfer's count cap (reads.COLLECT_MAX_ROWS) + 1


class JdbcSource(JdbcConnection, Source):
    """One database; every read is one query (or ``numPartitions`` range queries on the key)."""

    supports_fan_out = True

    def relation_sql(
        self, model: ModelConfig, recipient: RecipientConfig, *, bounds_where: str | None,
        plans: dict[str, ColumnPlan] | None = None, names: list[str] | None = None, tenant_where: str | None = None,
    ) -> str:
        """The query the database runs: columns (each in its planned form), tenant and (optionally) bounds,
        nothing left to Spark. ``names``: every column of the relation, in order (for ``SELECT *``).
        ``tenant_where`` replaces the one-recipient tenant predicate (a fan-out read's tenants and bounds)."""
        d = self.dialect
        select = ", ".join(d.ident(c) for c in model.columns) if model.columns else "*"
        if plans:
            select = select_list(d, list(model.columns or names or []), plans) or select
        where = []
        if tenant_where:
            where.append(tenant_where)
        elif model.organization_column:
            where.append(f"{d.ident(model.organization_column)} = {d.literal(recipient.id_in_provider_system)}")
        if bounds_where:
            where.append(bounds_where)
        condition = " AND ".join(where) or "1=1"
        if model.source_query is not None:
            return d.wrap(pasted_query(model.source_query, vendor=self.vendor), select, condition)
        return f"SELECT {select} FROM {d.relation(self.table_parts(model, recipient))} WHERE {condition}"

    def table_parts(self, model: ModelConfig, recipient: RecipientConfig) -> list[str]:
        """``[schema, table]`` or ``[table]`` as the database spells them (quoted when used, never folded)."""
        assert model.source_table is not None
        parts = split_qualified(model.source_table)
        if parts is None:  # the config check refuses such names; a programmatic model may still carry one
            raise ConfigError("models", [f'{model.model_name}.source_table: "{model.source_table}" is not a table name'])
        schema = self.schema_of(model, recipient)
        return [schema, *parts] if schema else parts

    def probe_schema(self, spark: SparkSession, model: ModelConfig, recipient: RecipientConfig) -> StructType:
        """Connect and learn the relation's columns (Spark runs it with ``WHERE 1=0``).

        Spark's answer is a function of the result's columns as the database describes them; where psycopg
        can ask PostgreSQL for that description (``_result_shape``, milliseconds), a process keeps Spark's
        answer per description and asks Spark again only when it changes (a column added, dropped, retyped
        or made NOT NULL): a resident worker's every transfer saved a JDBC schema query from the JVM."""
        options = self.jdbc_options(model, recipient)
        # PostgreSQL plans the probe's constant-false filter without running the relation, so the tenant's
        # predicate adds nothing there; without it, one kept schema serves every recipient of the model.
        every = "1=1" if self.vendor == "postgres" and model.organization_column else None
        sql = self.relation_sql(model, recipient, bounds_where=None, tenant_where=every)
        what = f"model {model.model_name}, recipient {recipient.id}"
        schema = kept_schema(self, sql, options, schema=self.schema_of(model, recipient),
                             ask=lambda: self.load_query(spark, sql, options, what=what).schema)
        fields = {f.name: f.dataType for f in schema.fields}
        for name in [*model.primary_key, model.last_modified_column, *filter(None, [model.organization_column])]:
            if name not in fields:
                raise SchemaError(
                    f'model {model.model_name}: column "{name}" is not in the source of recipient {recipient.id} '
                    f"(it has: {', '.join(fields)}); fix the model's columns"
                )
        return schema

    def plans(self, spark: SparkSession, *, model: ModelConfig, recipient: RecipientConfig, schema: StructType) -> dict[str, ColumnPlan]:
        """How each column is read so that it arrives exactly (see ``incsync.core.typemap``)."""
        catalog = None
        if model.source_table is not None:
            parts = self.table_parts(model, recipient)
            # Spark's schema (with its JDBC metadata) changes with any type change the plan depends on, so a
            # process asks the catalog once per table shape, not once per transfer.
            cache_key = (self.config.jdbc_url, self.config.user, tuple(parts), schema.json())
            catalog = _CATALOGS.get(cache_key)
            if catalog is None:
                catalog = self._catalog(spark, model, recipient, parts)
                if len(_CATALOGS) > 1024:
                    _CATALOGS.clear()
                _CATALOGS[cache_key] = catalog
        return plan_columns(vendor=self.vendor, model=model, schema=schema, catalog=catalog)

    def check(self, spark: SparkSession, *, model: ModelConfig, recipient: RecipientConfig) -> None:
        """Authorize the source: connect, and find the table and the model's columns."""
        schema = self.probe_schema(spark, model, recipient)
        self.plans(spark, model=model, recipient=recipient, schema=schema)  # column_types must name real columns
        fields = {f.name: f.dataType for f in schema.fields}
        kind = type(fields[model.last_modified_column]).__name__
        if kind == "TimestampNTZType" and not model.last_modified_timezone:
            raise SchemaError(
                f'model {model.model_name}: last_modified_column "{model.last_modified_column}" is a timestamp '
                "without time zone; declare the zone it is written in with `last_modified_timezone`"
            )
        if kind not in ("TimestampType", "TimestampNTZType"):
            raise SchemaError(
                f'model {model.model_name}: last_modified_column "{model.last_modified_column}" has type '
                f"{fields[model.last_modified_column].simpleString()}; it must be a timestamp"
            )
        if self.vendor == "postgres" and model.source_table is not None:
            self._warn_if_writable(spark, model, recipient)
        self.horizon(lambda: spark, model=model, recipient=recipient)  # warns naming a missing grant

    def horizon(self, spark: Callable[[], SparkSession], *, model: ModelConfig, recipient: RecipientConfig) -> SourceHorizon:
        """The database's clock and its oldest open transaction, in one query (see ``jdbc_horizon``)."""
        from incsync.sources.jdbc.horizon import source_horizon

        return source_horizon(self, spark, model=model, recipient=recipient)

    def _warn_if_writable(self, spark: SparkSession, model: ModelConfig, recipient: RecipientConfig) -> None:
        """Sources should be read with read-only credentials; say so when this user could write."""
        table = postgres_literal(self.dialect.relation(self.table_parts(model, recipient)))
        probe = f"SELECT has_table_privilege({table}, 'INSERT,UPDATE,DELETE,TRUNCATE') AS writable"
        what = f"model {model.model_name}, recipient {recipient.id}"
        if self.load_query(spark, probe, self.jdbc_options(model, recipient), what=what).collect()[0]["writable"]:
            log.warning(
                "source %s: user %s can write to %s; incsync only reads, so grant it SELECT only",
                self.config.name, self.config.user, model.source_table,
            )

    def read(
        self, spark: SparkSession, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds,
        rows_hint: int | None = None, where: str | None = None,
    ) -> DataFrame:
        """``where``: one more predicate for the database, on the relation's own columns (verify's buckets)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, TimestampType

        schema = self.probe_schema(spark, model, recipient)
        fields = {f.name: f.dataType for f in schema.fields}
        plans = self.plans(spark, model=model, recipient=recipient, schema=schema)
        zoned = isinstance(fields[model.last_modified_column], TimestampType)
        in_bounds = bounds_predicate(self.dialect, model, bounds, zoned=zoned) + (f" AND ({where})" if where else "")
        sql = self.relation_sql(model, recipient, bounds_where=in_bounds, plans=plans, names=list(fields))
        options = self.jdbc_options(model, recipient)
        what = f"model {model.model_name}, recipient {recipient.id}"
        # A range split costs a MIN/MAX query and pays off only for large reads.
        split = rows_hint is None or rows_hint >= PARTITIONED_READ_MIN_ROWS
        extra = self._partitioning(spark, model, fields, sql, options, what) if split else {}
        df = with_plan_metadata(self.load_query(spark, sql, options, what=what, extra=extra), plans)
        if model.organization_column and isinstance(fields[model.organization_column], StringType):
            # Case-insensitive or PAD SPACE collations match more than the exact value; Spark compares exactly.
            df = df.where(column(model.organization_column) == F.lit(recipient.id_in_provider_system))
        df = normalize_last_modified(df, model=model, recipient=recipient, bounds=bounds)
        return select_columns(df, model)

    def read_many(
        self, spark: SparkSession, *, model: ModelConfig, targets: Sequence[tuple[RecipientConfig, Bounds]],
        rows_hint: int | None = None,
    ) -> DataFrame:
        """One query for several recipients: ``(tenant IN (...) AND bounds) OR ...``, grouped by bounds."""
        from pyspark.sql.types import StringType, TimestampType

        anyone = targets[0][0]
        schema = self.probe_schema(spark, model, anyone)
        fields = {f.name: f.dataType for f in schema.fields}
        plans = self.plans(spark, model=model, recipient=anyone, schema=schema)
        zoned = isinstance(fields[model.last_modified_column], TimestampType)
        sql = self.relation_sql(
            model, anyone, bounds_where=None, plans=plans, names=list(fields),
            tenant_where=fan_out_predicate(self.dialect, model, targets, zoned=zoned),
        )
        options = self.jdbc_options(model, anyone)
        what = f"model {model.model_name}, {len(targets)} recipients"
        split = rows_hint is None or rows_hint >= PARTITIONED_READ_MIN_ROWS
        extra = self._partitioning(spark, model, fields, sql, options, what) if split else {}
        df = with_plan_metadata(self.load_query(spark, sql, options, what=what, extra=extra), plans)
        assert model.organization_column is not None
        if isinstance(fields[model.organization_column], StringType):
            # Case-insensitive or PAD SPACE collations match more than the exact values; Spark compares exactly.
            values = sorted({r.id_in_provider_system for r, _ in targets})
            df = df.where(column(model.organization_column).isin(values))
        df = normalize_last_modified(df, model=model, recipient=anyone, bounds=envelope(targets))
        return select_columns(df, model)

    def count_rows_many(self, *, model: ModelConfig, targets: Sequence[tuple[RecipientConfig, Bounds]], cap: int) -> int | None:
        anyone = targets[0][0]
        return self._count(
            model, anyone, cap,
            lambda zoned: self.relation_sql(
                model, anyone, bounds_where=None, tenant_where=fan_out_predicate(self.dialect, model, targets, zoned=zoned)),
        )

    def count_rows(self, *, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds, cap: int) -> int | None:
        """PostgreSQL: counts the very query ``read`` sends, ``LIMIT cap + 1``, through psycopg (~ms with
        an index on (tenant, last-modified)).

        The read only ever narrows that query (exact tenant match, exact zone-less bounds), so the count is
        an upper bound. Any doubt (another vendor, a URL with driver options, an error) answers None, and
        the read then runs as usual, with its own clear errors.
        """
        return self._count(
            model, recipient, cap,
            lambda zoned: self.relation_sql(model, recipient, bounds_where=bounds_predicate(self.dialect, model, bounds, zoned=zoned)),
        )

    def _count(self, model: ModelConfig, recipient: RecipientConfig, cap: int, sql_for: Callable[[bool], str]) -> int | None:
        target = postgres_target(self.config.jdbc_url) if self.vendor == "postgres" else None
        if target is None:
            return None
        try:
            with self.pg_connect(target, self.schema_of(model, recipient)) as conn:
                lm = self.dialect.ident(model.last_modified_column)
                relation = self.relation_sql(model, recipient, bounds_where=None)
                kind = conn.execute(f"SELECT {lm} FROM ({relation}) q LIMIT 0").description[0].type_code
                if kind not in (_PG_TIMESTAMPTZ, _PG_TIMESTAMP):
                    return None
                sql = sql_for(kind == _PG_TIMESTAMPTZ)
                return int(conn.execute(f"SELECT count(*) FROM ({sql} LIMIT {int(cap) + 1}) q").fetchone()[0])
        except Exception:  # noqa: BLE001 - the read reports the problem, naming the source
            log.debug("source %s: the row probe failed; reading through Spark", self.config.name)
            return None

    def _catalog(self, spark: SparkSession, model: ModelConfig, recipient: RecipientConfig, parts: list[str]) -> dict[str, str]:
        """Column -> type as the catalog spells it; through psycopg where the URL allows (ms), else one Spark query."""
        sql = catalog_sql(self.vendor, self.dialect.relation(parts), parts)
        target = postgres_target(self.config.jdbc_url) if self.vendor == "postgres" else None
        if target is not None:
            try:
                with self.pg_connect(target, self.schema_of(model, recipient)) as conn:
                    return {name: kind for name, kind in conn.execute(sql).fetchall()}
            except Exception:  # noqa: BLE001 - Spark's JDBC read below reports the problem, naming the source
                log.debug("source %s: the catalog probe failed; asking through Spark", self.config.name)
        what = f"model {model.model_name}, recipient {recipient.id}"
        df = self.load_query(spark, sql, self.jdbc_options(model, recipient), what=what)
        try:
            return {r["name"]: r["type"] for r in df.collect()}
        except Exception as exc:  # noqa: BLE001 - same translation as at connect time
            raise self.source_error(exc, what=what) from None

    def _partitioning(
        self, spark: SparkSession, model: ModelConfig, fields: dict[str, DataType], sql: str, options: dict[str, str], what: str
    ) -> dict[str, str]:
        """``numPartitions`` range reads on a single numeric key, bounded by its min/max inside the bounds."""
        n = self.config.max_concurrent_queries_per_transfer
        if n <= 1:
            return {}
        key = model.primary_key[0]
        if len(model.primary_key) != 1 or type(fields[key]).__name__ not in _NUMERIC_KEYS:
            log.info("model %s: key %s is not one numeric column; reading with one query", model.model_name, model.primary_key)
            return {}
        k = self.dialect.ident(key)
        bounds_query = self.load_query(spark, f"SELECT MIN({k}) AS lo, MAX({k}) AS hi FROM ({sql}) b", options, what=what)
        try:
            stats = bounds_query.collect()[0]
        except Exception as exc:  # noqa: BLE001 - same translation as at connect time
            raise self.source_error(exc, what=what) from None
        if stats["lo"] is None or stats["lo"] == stats["hi"]:
            return {}
        return {
            "partitionColumn": key,
            "lowerBound": str(int(stats["lo"])),
            "upperBound": str(int(stats["hi"]) + 1),
            "numPartitions": str(n),
        }


_PG_TIMESTAMP, _PG_TIMESTAMPTZ = 1114, 1184  # type OIDs
_CATALOGS: dict[tuple[object, ...], dict[str, str]] = {}  # see JdbcSource.plans

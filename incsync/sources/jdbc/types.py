"""Column types of a JDBC source: the catalog's spelling of each column, and the form it is read in.

A table's columns are looked up in the database's catalog (PostgreSQL ``format_type``, MySQL/MariaDB
``information_schema.COLUMNS.COLUMN_TYPE``), since Spark's JDBC schema clamps decimals to 38 digits and
drops precision. A ``source_query`` has no catalog entry: its plan comes from the driver's metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig
from incsync.core.typemap import (
    METADATA_KEY,
    OVERRIDE_HELP,
    ColumnPlan,
    cast_sql,
    override_arrow,
    plan_column,
    spark_from_epoch,
)
from incsync.core.vendor_sql import mysql_literal, postgres_literal
from incsync.errors import SchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from incsync.core.vendor_sql import _Dialect


def catalog_sql(vendor: str, relation: str, parts: list[str]) -> str:
    """One row per column (``name``, ``type``) of the table ``parts``; ``relation`` is its quoted spelling."""
    if vendor == "postgres":
        return (
            "SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type FROM pg_catalog.pg_attribute a "
            f"WHERE a.attrelid = to_regclass({postgres_literal(relation)}) AND a.attnum > 0 AND NOT a.attisdropped"
        )
    schema = mysql_literal(parts[0]) if len(parts) > 1 else "DATABASE()"
    table = mysql_literal(parts[-1])
    # information_schema compares names case-insensitively; with lower_case_table_names=0 the server
    # does not, so `BigCo` and `bigco` are two databases and only the exact one may answer.
    return (
        "SELECT COLUMN_NAME AS name, LOWER(COLUMN_TYPE) AS type FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {table} AND (@@lower_case_table_names <> 0 "
        f"OR BINARY TABLE_SCHEMA = BINARY {schema} AND BINARY TABLE_NAME = BINARY {table})"
    )


def plan_columns(
    *, vendor: str, model: ModelConfig, schema: StructType, catalog: dict[str, str] | None
) -> dict[str, ColumnPlan]:
    """A plan for every column Spark sees; ``column_types:`` entries must name one of them."""
    names = [f.name for f in schema.fields]
    overrides = dict(model.column_types or {})
    unknown = [c for c in overrides if c not in names]
    if unknown:
        raise SchemaError(
            f"model {model.model_name}: column_types names {unknown}, which the source does not have "
            f"(it has: {', '.join(names)}); fix `column_types`"
        )
    for column, kind in overrides.items():
        if override_arrow(kind) is None:
            raise SchemaError(f'model {model.model_name}: column_types.{column}: "{kind}" is not one of {OVERRIDE_HELP}')
    key = tuple(model.primary_key)
    return {
        f.name: plan_column(
            vendor=vendor, name=f.name, spark_type=f.dataType.simpleString(), metadata=dict(f.metadata or {}),
            catalog_type=(catalog or {}).get(f.name), override=overrides.get(f.name), model=model.model_name, key=key,
            last_modified=model.last_modified_column,
        )
        for f in schema.fields
    }


def select_list(dialect: _Dialect, names: list[str], plans: dict[str, ColumnPlan]) -> str | None:
    """The select list with each planned cast (``"a"::text AS "a"``); None when no column needs one."""
    if not any(plans[n].cast for n in names if n in plans):
        return None
    items = []
    for name in names:
        quoted = dialect.ident(name)
        plan = plans.get(name)
        items.append(f"{cast_sql(plan, quoted)} AS {quoted}" if plan and plan.cast else quoted)
    return ", ".join(items)


def with_plan_metadata(df: DataFrame, plans: dict[str, ColumnPlan]) -> DataFrame:
    """Each column carries its plan (Spark column metadata): staging converts by it, destinations read the source type.
    A date or timestamp read as its integer (``typemap.INFINITY``) becomes a date or timestamp again here."""
    from pyspark.sql import functions as F

    from incsync.sources.base import column

    def planned(name: str):  # noqa: ANN202 - a pyspark Column
        expression = spark_from_epoch(plans[name], "`" + name.replace("`", "``") + "`")
        value = F.expr(expression) if expression else column(name)
        return value.alias(name, metadata={METADATA_KEY: plans[name].to_json()})

    return df.select(*[planned(name) if name in plans else column(name) for name in df.columns])

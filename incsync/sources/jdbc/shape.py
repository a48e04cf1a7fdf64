"""Spark's JDBC schema of a relation, kept per process while PostgreSQL describes the relation's result the same.

Spark learns a JDBC relation's schema by running it with ``WHERE 1=0`` from the JVM (a connection and a
query over py4j: ~0.3 s of every transfer of a resident worker, benchmarks/README "Profile of A on the README
worker"). Its answer is a function of the result's columns as the database describes them, which psycopg
asks in milliseconds; so the answer is kept per description and Spark is asked again only when the
description changes: a column added, dropped, renamed, retyped (its type modifier too: precision, scale,
length) or made NOT NULL. Other vendors and URLs psycopg cannot reach ask Spark every time, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from incsync.core.vendor_sql import postgres_target

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from incsync.sources.jdbc.connect import JdbcConnection

log = logging.getLogger(__name__)

_SCHEMAS: dict[tuple[object, ...], StructType] = {}
MAX_KEPT = 1024


def kept_schema(
    source: JdbcConnection, sql: str, options: dict[str, str], *, schema: str | None, ask: Callable[[], StructType],
) -> StructType:
    """Spark's schema of ``sql`` (``ask``), kept while ``result_shape`` stays the same; ``schema``: the
    recipient's schema under schema tenancy (the search path the relation resolves in)."""
    shape = result_shape(source, sql, schema)
    if shape is None:
        return ask()
    key = (source.config.jdbc_url, source.config.user, tuple(sorted(options.items())), sql, shape)
    kept = _SCHEMAS.get(key)
    if kept is None:
        kept = ask()
        if len(_SCHEMAS) >= MAX_KEPT:
            _SCHEMAS.clear()
        _SCHEMAS[key] = kept
    return kept


def result_shape(source: JdbcConnection, sql: str, schema: str | None) -> tuple[object, ...] | None:
    """PostgreSQL's description of ``sql``'s result, all Spark's JDBC schema is made of: each column's name,
    type, type modifier and table column, and those table columns' NOT NULL (the driver's nullability).
    None where psycopg cannot ask (another vendor, a URL with driver options, an error)."""
    target = postgres_target(source.config.jdbc_url) if source.vendor == "postgres" else None
    if target is None:
        return None
    try:
        with source.pg_connect(target, schema) as conn:
            result = conn.execute(f"SELECT * FROM ({sql}) q LIMIT 0").pgresult  # type: ignore[attr-defined]  # pg_connect yields a psycopg Connection typed as object
            columns = tuple((result.fname(i), result.ftype(i), result.fmod(i), result.ftable(i), result.ftablecol(i))
                            for i in range(result.nfields))
            tables = sorted({c[3] for c in columns if c[3]})
            facts = conn.execute(  # type: ignore[attr-defined]  # as above
                "SELECT attrelid::bigint, attnum, attnotnull FROM pg_attribute WHERE attrelid = ANY(%s::oid[]) "
                "AND attnum > 0 AND NOT attisdropped ORDER BY 1, 2", (tables,),
            ).fetchall() if tables else []
            return columns, tuple(facts)
    except Exception:  # noqa: BLE001 - Spark's probe reports the problem, naming the source
        log.debug("source %s: the result-shape probe failed; asking Spark", source.config.name)
        return None

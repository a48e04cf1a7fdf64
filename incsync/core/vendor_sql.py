"""SQL text and connection settings that differ by database vendor, where each vendor's driver comes from,
and the bounds and tenant predicates a read pushes down.

Spark JDBC has no bind parameters, so a tenant value is written as a literal that no session setting
can reinterpret: PostgreSQL ``E'...'`` with quotes and backslashes doubled; MySQL a hex literal
converted to text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from incsync.core.bounds import UTC, Bounds
from incsync.errors import ConfigError


class ReadModel(Protocol):
    """The columns a read's predicates name (a model of the configuration is one)."""

    @property
    def last_modified_column(self) -> str: ...

    @property
    def organization_column(self) -> str | None: ...


class Tenant(Protocol):
    """A recipient as the source knows it (a recipient of the configuration is one)."""

    @property
    def id_in_provider_system(self) -> str: ...


@dataclass(frozen=True)
class Driver:
    """Where a vendor's JDBC driver comes from."""

    class_name: str
    os_jar: str  # where the OS package installs the jar
    package: str


DRIVERS: dict[str, Driver] = {
    "postgres": Driver("org.postgresql.Driver", "/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java"),
    "mysql": Driver("org.mariadb.jdbc.Driver", "/usr/share/java/mariadb-java-client.jar", "libmariadb-java"),
    "mariadb": Driver("org.mariadb.jdbc.Driver", "/usr/share/java/mariadb-java-client.jar", "libmariadb-java"),
}


_PG_URL_RE = re.compile(r"^jdbc:postgresql://([A-Za-z0-9_.-]+)(?::(\d+))?/([A-Za-z0-9_-]+)$")


def postgres_target(jdbc_url: str) -> dict[str, object] | None:
    """host, port and database of a plain ``jdbc:postgresql://host[:port]/db``; None for anything more."""
    match = _PG_URL_RE.match(jdbc_url)
    if match is None:
        return None
    host, port, dbname = match.groups()
    return {"host": host, "port": int(port or 5432), "dbname": dbname}


def postgres_literal(value: str) -> str:
    """An escape-string literal: means the same whatever ``standard_conforming_strings`` says."""
    _reject_nul(value)
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def mysql_literal(value: str) -> str:
    """A hex literal read as utf8mb4 text: immune to ``NO_BACKSLASH_ESCAPES`` and ``ANSI_QUOTES``."""
    _reject_nul(value)
    return f"CONVERT(X'{value.encode('utf-8').hex()}' USING utf8mb4)"


def _reject_nul(value: str) -> None:
    if "\x00" in value:
        raise ConfigError("recipients", ["id_in_provider_system: a NUL character cannot be a tenant value; remove it"])


class _Dialect:
    """SQL text that differs by vendor."""

    quote = '"'

    def ident(self, name: str) -> str:
        """A quoted identifier: the name exactly as the database spells it (case, spaces, reserved words)."""
        if "\x00" in name:
            raise ConfigError("models", [f"identifier {name!r}: a NUL character cannot be part of a name; remove it"])
        return self.quote + name.replace(self.quote, self.quote * 2) + self.quote

    def relation(self, parts: list[str]) -> str:
        return ".".join(self.ident(p) for p in parts)

    def literal(self, value: str) -> str:
        return postgres_literal(value)

    def timestamp(self, ts: datetime, *, zoned: bool) -> str:
        text = ts.strftime("%Y-%m-%d %H:%M:%S.%f")
        return f"TIMESTAMPTZ '{text}+00:00'" if zoned else f"TIMESTAMP '{text}'"

    def wrap(self, source_query: str, select: str, where: str) -> str:
        # The newline closes a line comment the query may still hold before the parenthesis.
        return f"WITH q AS ({source_query}\n) SELECT {select} FROM q WHERE {where}"

    def url(self, url: str, schema: str | None) -> str:
        return url

    def properties(self, schema: str | None) -> dict[str, str]:
        # currentSchema makes unqualified names in a source_query resolve in the recipient's schema.
        props = {"readOnly": "true", "ApplicationName": "incsync", "connectTimeout": "10", "loginTimeout": "10"}
        if schema:
            props["currentSchema"] = self.ident(schema)  # quoted: a mixed-case schema must not fold
        return props

    def rehearsal(self, rows: int) -> str:
        """A query that reads no table and returns ``rows`` generated rows of the column types transfers
        read most (bigint, text, numeric, timestamp with time zone, boolean, integer): a warm-up runs Spark's
        JDBC read and Parquet write over them so the first transfer's rows do not run through a cold JVM."""
        return (
            "SELECT g::bigint AS id, 'tenant-' || (g % 7) AS tenant, ((g % 100000) / 100.0)::numeric(12,2) AS amount, "
            "TIMESTAMPTZ '2025-01-01 00:00:00+00' + g * INTERVAL '1 second' AS updated_at, g % 3 = 0 AS flag, "
            f"(g % 1000)::int AS n, md5(g::text) AS note FROM generate_series(1, {int(rows)}) AS g"
        )


class _MySqlDialect(_Dialect):
    quote = "`"

    def literal(self, value: str) -> str:
        return mysql_literal(value)

    def timestamp(self, ts: datetime, *, zoned: bool) -> str:
        # The session runs in UTC (time_zone='+00:00'), so TIMESTAMP columns compare in UTC.
        return f"'{ts.strftime('%Y-%m-%d %H:%M:%S.%f')}'"

    def wrap(self, source_query: str, select: str, where: str) -> str:
        # A derived table, not a CTE: MySQL 5.7 has no WITH.
        return f"SELECT {select} FROM ({source_query}\n) q WHERE {where}"

    def url(self, url: str, schema: str | None) -> str:
        """``jdbc:mysql:`` so Spark picks its MySQL dialect (backquotes, DATETIME as timestamp_ntz);
        the MariaDB driver accepts it (3.x with ``permitMysqlScheme``). Schema tenancy: the
        recipient's schema is the URL's database, written as it is (the driver takes every character
        up to the first ``?``, undecoded: ``/globex-eu``, ``/Acme Corp``), so a ``source_query``'s
        unqualified tables resolve in it; a name holding a ``?`` cannot be written there, and a
        ``source_table`` read names the schema in the query anyway (see ``schema_names``)."""
        url = re.sub(r"^jdbc:mariadb:", "jdbc:mysql:", url)
        if schema and "?" not in schema:
            url = re.sub(r"^(jdbc:mysql://[^/?]*)(/[^?]*)?", lambda m: f"{m.group(1)}/{schema}", url)
        if "permitMysqlScheme" not in url:
            url += ("&" if "?" in url else "?") + "permitMysqlScheme"
        return url

    def properties(self, schema: str | None) -> dict[str, str]:
        # Session in UTC and the driver told so: TIMESTAMP values arrive as the right instant and
        # DATETIME wall clocks arrive unchanged, whatever the JVM's default zone.
        return {
            "sessionVariables": "time_zone='+00:00'",
            "serverTimezone": "UTC",
            "useLegacyDatetimeCode": "false",
            "connectTimeout": "10000",
        }

    def rehearsal(self, rows: int) -> str:
        # No generate_series, and MySQL's recursive CTEs stop at 1,000 levels: cross joins of ten digits
        # (10 ** places rows, places from ``rows``).
        places = max(1, len(str(max(1, int(rows) - 1))))
        digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
        number = " + ".join(f"{10 ** i} * t{i}.d" for i in range(places))
        joined = " CROSS JOIN ".join(f"{digits} AS t{i}" for i in range(places))
        return (
            "SELECT id, CONCAT('tenant-', id % 7) AS tenant, CAST((id % 100000) / 100 AS DECIMAL(12,2)) AS amount, "
            "TIMESTAMP '2025-01-01 00:00:00' + INTERVAL id SECOND AS updated_at, id % 3 = 0 AS flag, "
            f"CAST(id % 1000 AS SIGNED) AS n, MD5(id) AS note FROM (SELECT {number} AS id FROM {joined}) AS g"
        )


def dialect_for(vendor: str) -> _Dialect:
    return _MySqlDialect() if vendor in ("mysql", "mariadb") else _Dialect()


def bounds_predicate(dialect: _Dialect, model: ReadModel, bounds: Bounds, *, zoned: bool) -> str:
    """``last_modified`` within ``bounds``, as the database compares it (``zoned``: a column with a zone)."""
    lower, upper = bounds.lower.astimezone(UTC), bounds.upper.astimezone(UTC)
    if not zoned:
        # Zone-less column: a day wider in the database, exact after conversion (normalize_last_modified).
        lower, upper = (lower - timedelta(days=1)).replace(tzinfo=None), (upper + timedelta(days=1)).replace(tzinfo=None)
    lm = dialect.ident(model.last_modified_column)
    # NULL last-modified rows come along so validation names them (docs/design.md#extract).
    return (
        f"({lm} >= {dialect.timestamp(lower, zoned=zoned)} AND {lm} < {dialect.timestamp(upper, zoned=zoned)}"
        f" OR {lm} IS NULL)"
    )


def fan_out_predicate(
    dialect: _Dialect, model: ReadModel, targets: Sequence[tuple[Tenant, Bounds]], *, zoned: bool
) -> str:
    """Several recipients' rows in one predicate: ``(tenant IN (...) AND bounds) OR ...``, grouped by bounds."""
    assert model.organization_column is not None
    tenant = dialect.ident(model.organization_column)
    by_bounds: dict[tuple[datetime, datetime], list[str]] = {}
    for recipient, bounds in targets:
        by_bounds.setdefault((bounds.lower, bounds.upper), []).append(recipient.id_in_provider_system)
    terms = []
    for (lower, upper), values in by_bounds.items():
        literals = ", ".join(dialect.literal(v) for v in sorted(set(values)))
        bounds = Bounds(lower=lower, upper=upper, lookback_seconds=0, reason="fan_out")
        terms.append(f"({tenant} IN ({literals}) AND {bounds_predicate(dialect, model, bounds, zoned=zoned)})")
    return "(" + " OR ".join(terms) + ")"

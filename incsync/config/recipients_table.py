"""Recipients kept in a database table (``recipients_from``) instead of, or beside, the config file.

The table has one row per recipient with the file's recipient fields as columns: ``id``,
``id_in_provider_system``, ``destination`` (required), ``enabled``, ``tags`` (a JSON object),
``products`` (a ``text[]`` or a JSON array; NULL: every model), ``default_full_refresh_min_start_time_epoch``
(optional). It is read with the source's own
credentials and validated exactly like the file's recipients; ``resources.cached_config`` reads it
again every ``refresh_seconds``, so the sensor sees new rows on its next tick.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from incsync.errors import ConfigError

if TYPE_CHECKING:
    from incsync.config.sources import JdbcSourceConfig

REQUIRED = ("id", "id_in_provider_system", "destination")
OPTIONAL = ("enabled", "tags", "products", "default_full_refresh_min_start_time_epoch")
WHERE = "recipients_from"


def recipients_source(data: dict[str, Any], *, path: str) -> dict[str, Any] | None:
    """The source mapping ``data["recipients_from"]`` reads through (None when it is not set), checked to be
    a postgres source; the caller validates it as a ``JdbcSourceConfig`` for ``read_recipient_rows``."""
    spec = data.get(WHERE)
    if not spec:
        return None
    if not isinstance(spec, dict) or not spec.get("source") or not spec.get("table"):
        raise ConfigError(path, [f"{WHERE}: set `source` (a postgres source) and `table` (e.g. public.incsync_recipients)"])
    sources = {s.get("name"): s for s in data.get("sources") or [] if isinstance(s, dict)}
    source = sources.get(spec["source"])
    if source is None or source.get("vendor") != "postgres":
        raise ConfigError(path, [
            f'{WHERE}.source: "{spec["source"]}" must name a source of vendor postgres (known: {", ".join(map(str, sources))})'
        ])
    return source


def _checked(config: JdbcSourceConfig, table: str, *, path: str, where: str) -> dict[str, Any]:
    """Where ``config`` connects (psycopg's arguments), after checking ``table`` is a plain name."""
    from incsync.core.vendor_sql import postgres_target

    target = postgres_target(config.jdbc_url)
    if target is None:
        raise ConfigError(path, [f"{WHERE}.source: {config.name}'s jdbc_url must be jdbc:postgresql://host[:port]/database"])
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", table):
        raise ConfigError(path, [f'{where}: "{table}" must be `table` or `schema.table`'])
    return target


def _query(config: JdbcSourceConfig, target: dict[str, Any], statements: list[Any], *, path: str,
           what: str) -> list[Any]:
    """Each statement's column names and rows, in one read-only session of the source; a failure fails the load naming ``what``."""
    import psycopg

    password = config.password()
    try:
        with psycopg.connect(
            **target, user=config.user, password=password.get_secret_value() if password else None,
            connect_timeout=10, autocommit=True, application_name="incsync",
            options="-c default_transaction_read_only=on",
        ) as conn:
            answers = []
            for statement in statements:
                cursor = conn.execute(statement)
                answers.append(([d.name for d in cursor.description or []], cursor.fetchall()))
            return answers
    except psycopg.Error as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(path, [f"{WHERE}: cannot read {what} through source {config.name}: {detail}"]) from None


def read_table(config: JdbcSourceConfig, table: str, *, path: str, where: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The column names and rows of ``table``, read through the source ``config`` in a read-only session; a
    table that cannot be read fails the load, naming ``where`` (the setting) and why."""
    from psycopg import sql

    target = _checked(config, table, path=path, where=where)
    statement = sql.SQL("SELECT * FROM {} ORDER BY 1").format(sql.Identifier(*table.split(".")))
    [(names, rows)] = _query(config, target, [statement], path=path, what=table)
    return names, rows


def tables_digest(config: JdbcSourceConfig, tables: list[tuple[str, str]], *, path: str) -> str:
    """A digest of what ``tables`` ((table, setting) each) hold, computed in the database: one short answer per
    table, so a caller that already loaded these rows can tell, without reading them, that nothing changed."""
    from psycopg import sql

    targets = [_checked(config, table, path=path, where=where) for table, where in tables]
    statements = [
        sql.SQL("SELECT count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM {} AS t").format(
            sql.Identifier(*table.split(".")))
        for table, _ in tables
    ]
    answers = _query(config, targets[0], statements, path=path, what=" and ".join(t for t, _ in tables))
    return "|".join(f"{rows[0][0]}:{rows[0][1]}" for _, rows in answers)


def read_recipient_rows(config: JdbcSourceConfig, table: str, *, path: str) -> list[dict[str, Any]]:
    """The rows of ``table``, read through the source ``config``, as recipient mappings."""
    names, rows = read_table(config, table, path=path, where=f"{WHERE}.table")
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise ConfigError(path, [f"{WHERE}: table {table} lacks the column(s) {', '.join(missing)}; it needs {', '.join(REQUIRED)}"])
    out = []
    for row in rows:
        values = dict(zip(names, row, strict=False))
        entry = {k: values[k] for k in (*REQUIRED, *OPTIONAL) if k in values and values[k] is not None}
        for key in REQUIRED:
            entry[key] = str(entry[key]) if key in entry else entry.get(key)
        for key in ("tags", "products"):
            if isinstance(entry.get(key), str):
                try:
                    entry[key] = json.loads(entry[key])
                except json.JSONDecodeError:
                    pass  # validation then names the row and the field
        out.append(entry)
    return out

"""Adapting a live PostgreSQL destination table to a staged batch, inside the publish transaction.

The table keeps its identity (oid): added columns are ``ADD COLUMN``, a widening is ``ALTER COLUMN
TYPE``, so the views, grants, indexes, policies, comments and columns a recipient built on it survive.
A change that is not a widening waits for a full refresh, which empties the table in the same
transaction before it changes the type. ``<schema>._incsync_columns`` remembers which columns incsync
published, so a recipient's own columns are never taken for columns the source dropped. Where
PostgreSQL itself forbids the change (a view or policy uses the column), the transfer fails before
anything is published, naming the object and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import psycopg
from psycopg import sql

from incsync.core.schema_change import SchemaDiff, TypeChange, change_metadata, incompatible_error, pg_diff
from incsync.errors import SchemaError

_DEPENDENTS = """
SELECT DISTINCT CASE v.relkind WHEN 'm' THEN 'materialized view' ELSE 'view' END, v.oid::regclass::text, a.attname
FROM pg_depend d
JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
JOIN pg_class v ON v.oid = r.ev_class
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = %(table)s::regclass AND v.oid <> d.refobjid
  AND a.attname = ANY(%(columns)s)
UNION
SELECT DISTINCT 'policy', quote_ident(p.polname) || ' ON ' || %(table)s, a.attname
FROM pg_depend d
JOIN pg_policy p ON d.classid = 'pg_policy'::regclass AND d.objid = p.oid
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = %(table)s::regclass AND a.attname = ANY(%(columns)s)
ORDER BY 1, 2, 3
"""


def _regclass(schema: str, table: str) -> str:
    return sql.Identifier(schema, table).as_string(None)


def table_columns(conn: psycopg.Connection, schema: str, table: str) -> dict[str, str] | None:
    """Column → ``format_type`` of ``schema.table`` in order; None when there is no such table."""
    # The table by its oid (to_regclass): joining on relname and nspname let the planner scan every
    # recipient's table of that name, a cost that grows with the number of recipient schemas.
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod)
           FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid
           WHERE c.oid = to_regclass(%s) AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY a.attnum""",
        [sql.Identifier(schema, table).as_string(conn)],
    ).fetchall()
    return {name: kind for name, kind in rows} if rows else None


def dependents(conn: psycopg.Connection, schema: str, table: str, columns: list[str]) -> list[tuple[str, str, str]]:
    """(kind, name, column) of the views and policies that use ``columns``: PostgreSQL cannot retype those."""
    if not columns:
        return []
    return conn.execute(_DEPENDENTS, {"table": _regclass(schema, table), "columns": columns}).fetchall()


def _retyped_by_recipient(applied: SchemaDiff, drift: SchemaDiff, known: dict[str, str]) -> list[TypeChange]:
    """The incompatible columns whose type incsync published is the batch's still: the table's type is not
    the source's doing but a change made to the table since (by the recipient)."""
    moved = {c.column for c in (*drift.widened, *drift.narrowed, *drift.incompatible)}
    return [c for c in applied.incompatible if c.column in known and c.column not in moved]


def _recipient_retyped_error(where: str, label: str, changes: list[TypeChange], *, model: str, recipient: str) -> SchemaError:
    listed = "; ".join(f"column {c.column} is {c.old} in {label}, where incsync published {c.new}" for c in changes)
    first = changes[0]
    return SchemaError(
        f"{where}: the recipient changed a column's type in {label} ({listed}); nothing was published. Fix: the "
        f"recipient changes it back (ALTER TABLE {label} ALTER COLUMN {first.column} TYPE {first.new} ...), or the "
        f"provider reloads the copy with the source's types (incsync transfer {model} --recipient {recipient} --full-refresh)."
    )


def _blocked_error(where: str, label: str, changes: list[TypeChange], blockers: list[tuple[str, str, str]]) -> SchemaError:
    new = {c.column: c.new for c in changes}
    first_kind, first_name, first_column = blockers[0]
    users = "; ".join(f"{kind} {name} uses column {column}" for kind, name, column in blockers)
    changed = ", ".join(map(str, changes))
    drop = f"DROP POLICY {first_name}" if first_kind == "policy" else f"DROP {first_kind.upper()} {first_name}"
    return SchemaError(
        f"{where}: the source changed {changed}, but PostgreSQL cannot change the type of a column another object "
        f"uses ({users} of {label}); nothing was published and {label} is as it was. Fix: change the column around "
        f"the {first_kind} in one transaction — BEGIN; {drop}; ALTER TABLE {label} ALTER COLUMN {first_column} TYPE "
        f"{new[first_column]}; <recreate the {first_kind}>; COMMIT; — then re-run the transfer."
    )


COLUMNS_TABLE = "_incsync_columns"

_COLUMNS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    model_name text NOT NULL,
    column_name text NOT NULL,
    column_type text NOT NULL,
    in_source boolean NOT NULL,
    PRIMARY KEY (model_name, column_name)
)"""


@dataclass(frozen=True)
class Evolution:
    """What adapting the table found and did."""

    drift: SchemaDiff  # the batch against the columns incsync published last time
    applied: SchemaDiff  # the batch against the table as it is (a recipient's own columns are not drift)
    deleted: int = 0  # rows a full refresh's incompatible change emptied first
    stale: tuple[str, ...] = ()  # columns incsync published that the source no longer has

    def metadata(self, *, refresh: bool) -> dict[str, object]:
        return change_metadata(self.drift, replace(self.applied, dropped=self.drift.dropped), replaced=refresh)


Published = tuple[dict[str, str], tuple[str, ...]]  # (columns the source had at the last publish -> type, dropped since)


def published_columns(conn: psycopg.Connection, schema: str, model: str) -> Published | None:
    """(columns the source had at the last publish → type, columns it dropped since), None before the first."""
    exists = conn.execute("SELECT to_regclass(%s)", [_regclass(schema, COLUMNS_TABLE)]).fetchone()[0]
    if exists is None:
        return None
    rows = conn.execute(
        sql.SQL("SELECT column_name, column_type, in_source FROM {} WHERE model_name = %s ORDER BY column_name")
        .format(sql.Identifier(schema, COLUMNS_TABLE)), [model]).fetchall()
    if not rows:
        return None
    return {c: t for c, t, live in rows if live}, tuple(c for c, _, live in rows if not live)


def register(conn: psycopg.Connection, *, schema: str, model: str, wanted: dict[str, str], fresh: bool) -> None:
    """Record the columns this publish wrote (in its transaction); ``fresh``: the table was just created."""
    table = sql.Identifier(schema, COLUMNS_TABLE)
    conn.execute(sql.SQL(_COLUMNS_DDL).format(table=table))
    if fresh:
        conn.execute(sql.SQL("DELETE FROM {} WHERE model_name = %s").format(table), [model])
    conn.execute(sql.SQL("UPDATE {} SET in_source = false WHERE model_name = %s AND NOT column_name = ANY(%s)")
                 .format(table), [model, list(wanted)])
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {} (model_name, column_name, column_type, in_source) VALUES (%s, %s, %s, true) "
                    "ON CONFLICT (model_name, column_name) DO UPDATE SET column_type = EXCLUDED.column_type, "
                    "in_source = true").format(table),
            [(model, column, kind) for column, kind in wanted.items()],
        )


def evolve(
    conn: psycopg.Connection,
    *,
    schema: str,
    table: str,
    current: dict[str, str],
    wanted: dict[str, str],
    published: Published | None,
    refresh: bool,
    where: str,
    model: str,
    recipient: str,
) -> Evolution:
    """Make ``schema.table`` (columns ``current``; ``published``: what the registry says, read in the same
    transaction) hold the batch's columns ``wanted``, in place."""
    applied = pg_diff(current, wanted)
    known, gone = published if published is not None else (current, ())
    drift = pg_diff(known, wanted)
    if published is None:  # a table from before the registry: its other columns may be a recipient's own
        drift = replace(drift, dropped=())
    label = f"{schema}.{table}"
    if applied.incompatible and not refresh:
        if published is not None and (theirs := _retyped_by_recipient(applied, drift, known)):
            raise _recipient_retyped_error(where, label, theirs, model=model, recipient=recipient)
        raise incompatible_error(where, label, applied.incompatible, model=model, recipient=recipient)
    retyped = [*applied.widened, *applied.incompatible]
    blockers = dependents(conn, schema, table, [c.column for c in retyped])
    if blockers:
        raise _blocked_error(where, label, retyped, blockers)
    target = sql.Identifier(schema, table)
    for column, kind in applied.added:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(target, sql.Identifier(column), sql.SQL(kind)))
    for c in applied.widened:
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}").format(target, sql.Identifier(c.column), sql.SQL(c.new)))
    deleted = 0
    if applied.incompatible:
        # A full refresh replaces every row anyway: empty the table first so the old values need no cast.
        deleted = conn.execute(sql.SQL("DELETE FROM {}").format(target)).rowcount
        for c in applied.incompatible:
            conn.execute(sql.SQL("ALTER TABLE {t} ALTER COLUMN {c} TYPE {k} USING NULL::{k}").format(
                t=target, c=sql.Identifier(c.column), k=sql.SQL(c.new)))
    if published is None or published[0] != wanted:
        register(conn, schema=schema, model=model, wanted=wanted, fresh=False)
    stale = tuple(c for c in (*drift.dropped, *gone) if c in current and c not in wanted)
    return Evolution(drift=drift, applied=applied, deleted=deleted, stale=tuple(dict.fromkeys(stale)))

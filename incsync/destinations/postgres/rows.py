"""The row statements of a PostgreSQL publish: creating the table, the upsert of the staged rows, removals.

All run inside the publish transaction (``postgres_destination``), on the stage table ``postgres_load`` filled.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from psycopg import sql

from incsync.config.model import ModelConfig
from incsync.destinations.base import DELETED_AT, Removals
from incsync.destinations.postgres.load import STAGE


def create_table(conn: psycopg.Connection, target: sql.Composable, *, model: ModelConfig, wanted: dict[str, str]) -> None:
    body = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in wanted.items()]
    body.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, model.primary_key))))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(target, sql.SQL(", ").join(body)))


def upsert(target: sql.Composable, *, model: ModelConfig, batch_columns: list[str], stale: list[str], force: bool) -> sql.Composed:
    """``INSERT ... ON CONFLICT`` of the stage's rows into ``target``: a row is replaced only by a newer one
    or one as new with other values (``force``: by any other values); ``stale`` columns are emptied."""
    pk = sql.SQL(", ").join(map(sql.Identifier, model.primary_key))
    cols = sql.SQL(", ").join(map(sql.Identifier, batch_columns))
    lm = sql.Identifier(model.last_modified_column)
    updates = [c for c in batch_columns if c not in model.primary_key]
    insert = sql.SQL("INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {stage}").format(
        target=target, cols=cols, stage=STAGE)
    if updates or stale:
        sets = sql.SQL(", ").join([*(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates),
                                   *(sql.SQL("{} = NULL").format(sql.Identifier(c)) for c in stale)])
        insert = insert + sql.SQL(" ON CONFLICT ({pk}) DO UPDATE SET {sets} WHERE ").format(pk=pk, sets=sets)
        # A row is rewritten only when it changes (no dead tuples, no WAL for a replay). Values compare
        # as text, so every type (json too) has an equality. A full refresh's rows are the source's
        # current ones: any difference wins; otherwise newer, or as new with other values.
        values = [c for c in updates if c != model.last_modified_column] if not force else updates
        old = [sql.SQL("t.{}").format(sql.Identifier(c)) for c in [*values, *stale]]
        new = [*(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in values), *(sql.SQL("NULL") for _ in stale)]
        differ = sql.SQL("ROW({old})::text IS DISTINCT FROM ROW({new})::text").format(
            old=sql.SQL(", ").join(old), new=sql.SQL(", ").join(new))
        if force:
            insert = insert + differ
        elif values:
            insert = insert + sql.SQL("t.{lm} < EXCLUDED.{lm} OR (t.{lm} = EXCLUDED.{lm} AND {differ})").format(
                lm=lm, differ=differ)
        else:
            insert = insert + sql.SQL("t.{lm} < EXCLUDED.{lm}").format(lm=lm)
    else:
        insert = insert + sql.SQL(" ON CONFLICT ({pk}) DO NOTHING").format(pk=pk)
    return insert


def remove_keys(
    conn: psycopg.Connection, target: sql.Composable, *, model: ModelConfig, removals: Removals,
    columns: Callable[[], dict[str, str] | None],
) -> int:
    """Delete the keys, or stamp them ``_incsync_deleted_at``, inside the publish transaction; ``columns``
    reads the table's columns as they are now."""
    current = columns()
    if current is None:
        return 0
    if removals.mode == "soft" and DELETED_AT in current:  # a key back at the source is no longer deleted
        back = sql.SQL(" AND ").join(sql.SQL("t.{c} = s.{c}").format(c=sql.Identifier(c)) for c in model.primary_key)
        conn.execute(sql.SQL("UPDATE {t} AS t SET {d} = NULL FROM {s} AS s WHERE {m} AND t.{d} IS NOT NULL").format(
            t=target, d=sql.Identifier(DELETED_AT), s=STAGE, m=back))
    if removals.rows == 0:
        return 0
    keys = sql.Identifier("pg_temp", "_incsync_removals")
    types = columns() or {}
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(keys))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(keys, sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in model.primary_key)))
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
            keys, sql.SQL(", ").join(map(sql.Identifier, model.primary_key)))) as copy:
        for row in removals.keys.select(list(model.primary_key)).to_pylist():
            copy.write_row([row[c] for c in model.primary_key])
    match = sql.SQL(" AND ").join(sql.SQL("t.{c} = k.{c}").format(c=sql.Identifier(c)) for c in model.primary_key)
    if removals.mode == "soft":
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} timestamptz").format(target, sql.Identifier(DELETED_AT)))
        query = sql.SQL("UPDATE {t} AS t SET {d} = %s FROM {k} AS k WHERE {m} AND t.{d} IS NULL").format(
            t=target, d=sql.Identifier(DELETED_AT), k=keys, m=match)
        return conn.execute(query, [removals.at]).rowcount
    return conn.execute(sql.SQL("DELETE FROM {t} AS t USING {k} AS k WHERE {m}").format(t=target, k=keys, m=match)).rowcount

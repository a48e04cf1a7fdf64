"""The statements of a MariaDB publish: adapt the table (DDL, before the transaction), then inside one
InnoDB transaction upsert the stage's rows, delete what a full refresh lacks and remove keys.

The upsert is two statements, not ``INSERT ... ON DUPLICATE KEY UPDATE``: that one evaluates its
assignments left to right, so a guard on the last-modified column would see the value an earlier
assignment just wrote. ``UPDATE ... JOIN`` decides each row in its ``WHERE`` (on the rows as they were)
and assigns only the stage's values; an ``INSERT ... SELECT`` then adds the keys the table lacks.
"""

from __future__ import annotations

import pyarrow as pa

from incsync.config.model import ModelConfig
from incsync.core.schema_change import SchemaDiff
from incsync.destinations.base import DELETED_AT, Removals
from incsync.destinations.mariadb.connect import Connection, quote, run, table
from incsync.destinations.mariadb.load import STAGE
from incsync.destinations.mariadb.types import column_type, key_chars

KEYS = "_incsync_removals"


def _type(form: pa.Schema, name: str, *, key: tuple[str, ...], json: set[str], collation: str) -> str:
    if name in json:
        return "JSON"
    kind = column_type(form.field(name), key_chars=key_chars(form, key) if name in key else None, collation=collation)
    return f"{kind} NOT NULL" if name in key else kind


def create_table(conn: Connection, target: str, form: pa.Schema, *, key: tuple[str, ...], json: set[str],
                 collation: str) -> None:
    body = [f"{quote(f.name)} {_type(form, f.name, key=key, json=json, collation=collation)}" for f in form]
    body.append(f"PRIMARY KEY ({', '.join(map(quote, key))})")
    run(conn, f"CREATE TABLE {target} ({', '.join(body)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation}")


def alterations(form: pa.Schema, change: SchemaDiff, *, key: tuple[str, ...], json: set[str], collation: str,
                soft_stamp: bool) -> list[str]:
    """The ``ALTER TABLE`` clauses that add the batch's new columns and change types: a widening in place
    (DDL, before the publish transaction), an incompatible change on a table a full refresh rebuilds."""
    def spec(name: str) -> str:
        return _type(form, name, key=key, json=json, collation=collation)

    clauses = [f"ADD COLUMN {quote(c)} {spec(c)}" for c, _ in change.added]
    clauses += [f"MODIFY COLUMN {quote(c.column)} {spec(c.column)}" for c in [*change.widened, *change.incompatible]]
    if soft_stamp:
        clauses.append(f"ADD COLUMN {quote(DELETED_AT)} DATETIME(6) NULL")
    return clauses


def _match(model: ModelConfig, a: str, b: str) -> str:
    return " AND ".join(f"{a}.{quote(c)} = {b}.{quote(c)}" for c in model.primary_key)


def upsert(conn: Connection, database: str, target: str, *, model: ModelConfig, columns: list[str], stale: list[str],
           force: bool) -> int:
    """Update the rows the stage holds a newer version of (or one as new with other values; ``force``: any
    other values), then insert its new keys. Unchanged rows are not written; ``stale`` columns emptied."""
    stage = table(database, STAGE)
    lm = quote(model.last_modified_column)
    updates = [c for c in columns if c not in model.primary_key]
    values = updates if force else [c for c in updates if c != model.last_modified_column]
    same = [*(f"t.{quote(c)} <=> s.{quote(c)}" for c in values), *(f"t.{quote(c)} IS NULL" for c in stale)]
    differ = f"NOT ({' AND '.join(same)})" if same else "FALSE"
    when = differ if force else f"(t.{lm} < s.{lm} OR (t.{lm} = s.{lm} AND {differ}))"
    sets = [*(f"t.{quote(c)} = s.{quote(c)}" for c in updates), *(f"t.{quote(c)} = NULL" for c in stale)]
    written = 0
    if sets:
        written += run(conn, f"UPDATE {target} AS t JOIN {stage} AS s ON {_match(model, 't', 's')} "
                             f"SET {', '.join(sets)} WHERE {when}")
    cols = ", ".join(f"s.{quote(c)}" for c in columns)
    first = quote(model.primary_key[0])
    written += run(conn, f"INSERT INTO {target} ({', '.join(map(quote, columns))}) SELECT {cols} FROM {stage} AS s "
                         f"LEFT JOIN {target} AS t ON {_match(model, 't', 's')} WHERE t.{first} IS NULL")
    return written


def delete_missing(conn: Connection, database: str, target: str, model: ModelConfig) -> int:
    """A full refresh: delete the rows whose keys the stage does not hold."""
    first = quote(model.primary_key[0])
    return run(conn, f"DELETE t FROM {target} AS t LEFT JOIN {table(database, STAGE)} AS s ON {_match(model, 't', 's')} "
                     f"WHERE s.{first} IS NULL")


def remove_keys(conn: Connection, database: str, target: str, *, model: ModelConfig, removals: Removals,
                form: pa.Schema, has_stamp: bool, collation: str) -> int:
    """Delete the keys, or stamp them ``_incsync_deleted_at`` (a key back at the source loses its stamp)."""
    stamp = quote(DELETED_AT)
    if removals.mode == "soft" and has_stamp:
        run(conn, f"UPDATE {target} AS t JOIN {table(database, STAGE)} AS s ON {_match(model, 't', 's')} "
                  f"SET t.{stamp} = NULL WHERE t.{stamp} IS NOT NULL")
    if removals.rows == 0:
        return 0
    key = tuple(model.primary_key)
    keys = table(database, KEYS)
    body = ", ".join(f"{quote(c)} {_type(form, c, key=key, json=set(), collation=collation)}" for c in key)
    run(conn, f"DROP TEMPORARY TABLE IF EXISTS {keys}")
    run(conn, f"CREATE TEMPORARY TABLE {keys} ({body}, PRIMARY KEY ({', '.join(map(quote, key))})) ENGINE=InnoDB")
    picked = removals.keys.select(list(key))
    with conn.cursor() as cur:
        cur.executemany(f"INSERT IGNORE INTO {keys} VALUES ({', '.join(['%s'] * len(key))})",
                        [tuple(_plain(v) for v in row.values()) for row in picked.to_pylist()])
    if removals.mode == "soft":
        return run(conn, f"UPDATE {target} AS t JOIN {keys} AS k ON {_match(model, 't', 'k')} SET t.{stamp} = %s "
                         f"WHERE t.{stamp} IS NULL", [_plain(removals.at)])
    return run(conn, f"DELETE t FROM {target} AS t JOIN {keys} AS k ON {_match(model, 't', 'k')}")


def _plain(value: object) -> object:
    """A key value as PyMySQL writes it: an instant as its UTC wall clock."""
    from datetime import datetime, timezone

    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value

"""The statements of a DuckDB publish: load the stage, adapt the table in place, upsert, remove keys.

Staged Arrow types map onto DuckDB's own (docs/types.md): integers, DECIMAL(p,s) up to 38 digits,
TIMESTAMP WITH TIME ZONE, TIME, DATE, BLOB, VARCHAR, lists; a decimal wider than 38 digits goes as its
exact text, since DuckDB's DECIMAL stops there. All run inside the publish transaction.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from incsync.config.model import ModelConfig
from incsync.core.schema_change import SchemaDiff
from incsync.destinations.base import DELETED_AT, Removals
from incsync.destinations.duckdb.log import Session, quote
from incsync.destinations.types import _as_text
from incsync.staging.batch import StagedBatch

STAGE = "incsync_stage"
KEYS = "incsync_removals"


def duckdb_form(schema: pa.Schema) -> pa.Schema:
    """The batch's schema as DuckDB stores it: decimals past 38 digits as exact text."""
    return pa.schema([f.with_type(pa.string()) if pa.types.is_decimal256(f.type) else f for f in schema])


def load_stage(con: Session, batch: StagedBatch) -> pa.Schema:
    """The staged rows as the temporary table ``incsync_stage``; returns their schema in DuckDB's form."""
    form = duckdb_form(batch.schema).remove_metadata()

    def converted() -> Iterator[pa.RecordBatch]:
        for b in batch.reader():
            yield pa.RecordBatch.from_arrays(
                [c if c.type == f.type else _as_text(c) for c, f in zip(b.columns, form, strict=True)], schema=form)

    con.register("incsync_staged", pa.RecordBatchReader.from_batches(form, converted()))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {STAGE} AS SELECT * FROM incsync_staged")
    con.unregister("incsync_staged")
    return form


def table_schema(con: Session, target: str) -> pa.Schema:
    return con.sql(f"SELECT * FROM {target} LIMIT 0").to_arrow_table().schema


def duckdb_type(con: Session, column: str) -> str:
    """The DuckDB type the stage gave ``column``."""
    row = con.execute("SELECT data_type FROM duckdb_columns() WHERE table_name = ? AND column_name = ? AND database_name = 'temp'",
                      [STAGE, column]).fetchone()
    assert row is not None, column
    return row[0]


def adapt(con: Session, target: str, change: SchemaDiff, *, refresh: bool) -> int:
    """Add the batch's new columns and widen in place (a full refresh: any changed type, the rows deleted
    first so the old values need no cast). Returns the rows a full refresh's type change deleted."""
    for column, _ in change.added:
        con.execute(f"ALTER TABLE {target} ADD COLUMN {quote(column)} {duckdb_type(con, column)}")
    for c in change.widened:
        con.execute(f"ALTER TABLE {target} ALTER COLUMN {quote(c.column)} TYPE {duckdb_type(con, c.column)}")
    deleted = 0
    if change.incompatible and refresh:
        deleted = con.execute(f"DELETE FROM {target}").fetchone()[0]
        for c in change.incompatible:
            kind = duckdb_type(con, c.column)
            con.execute(f"ALTER TABLE {target} ALTER COLUMN {quote(c.column)} TYPE {kind} USING NULL::{kind}")
    return deleted


def _match(model: ModelConfig, a: str, b: str) -> str:
    return " AND ".join(f"{a}.{quote(c)} = {b}.{quote(c)}" for c in model.primary_key)


def upsert(con: Session, target: str, *, model: ModelConfig, columns: list[str], stale: list[str],
           force: bool) -> int:
    """Update the rows the stage holds a newer version of (or one as new with other values; ``force``: any
    other values), then insert its new keys. Unchanged rows are not written; ``stale`` columns emptied."""
    lm = quote(model.last_modified_column)
    updates = [c for c in columns if c not in model.primary_key]
    values = updates if force else [c for c in updates if c != model.last_modified_column]
    old = [f"t.{quote(c)}" for c in [*values, *stale]]
    new = [*(f"s.{quote(c)}" for c in values), *("NULL" for _ in stale)]
    differ = f"(row({', '.join(old)}) IS DISTINCT FROM row({', '.join(new)}))" if old else "false"
    when = differ if force else f"(t.{lm} < s.{lm} OR (t.{lm} = s.{lm} AND {differ}))"
    written = 0
    sets = [*(f"{quote(c)} = s.{quote(c)}" for c in updates), *(f"{quote(c)} = NULL" for c in stale)]
    if sets:
        written += con.execute(f"UPDATE {target} AS t SET {', '.join(sets)} FROM {STAGE} AS s "
                               f"WHERE {_match(model, 't', 's')} AND {when}").fetchone()[0]
    cols = ", ".join(map(quote, columns))
    written += con.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {STAGE} AS s "
                           f"WHERE NOT EXISTS (SELECT 1 FROM {target} AS t WHERE {_match(model, 't', 's')})").fetchone()[0]
    return written


def delete_missing(con: Session, target: str, model: ModelConfig) -> int:
    """A full refresh: delete the rows whose keys the stage does not hold."""
    return con.execute(f"DELETE FROM {target} AS t WHERE NOT EXISTS (SELECT 1 FROM {STAGE} AS s "
                       f"WHERE {_match(model, 't', 's')})").fetchone()[0]


def remove_keys(con: Session, target: str, *, model: ModelConfig, removals: Removals) -> int:
    """Delete the keys, or stamp them ``_incsync_deleted_at`` (a key back at the source loses its stamp)."""
    current = table_schema(con, target).names
    stamp = quote(DELETED_AT)
    if removals.mode == "soft" and DELETED_AT in current:
        con.execute(f"UPDATE {target} AS t SET {stamp} = NULL FROM {STAGE} AS s "
                    f"WHERE {_match(model, 't', 's')} AND t.{stamp} IS NOT NULL")
    if removals.rows == 0:
        return 0
    con.register("incsync_keys", removals.keys.select(list(model.primary_key)))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {KEYS} AS SELECT * FROM incsync_keys")
    con.unregister("incsync_keys")
    if removals.mode == "soft":
        if DELETED_AT not in current:
            con.execute(f"ALTER TABLE {target} ADD COLUMN {stamp} TIMESTAMPTZ")
        return con.execute(f"UPDATE {target} AS t SET {stamp} = ? FROM {KEYS} AS k WHERE {_match(model, 't', 'k')} "
                           f"AND t.{stamp} IS NULL", [removals.at]).fetchone()[0]
    return con.execute(f"DELETE FROM {target} AS t WHERE EXISTS (SELECT 1 FROM {KEYS} AS k "
                       f"WHERE {_match(model, 't', 'k')})").fetchone()[0]


__all__ = ["STAGE", "adapt", "delete_missing", "duckdb_form", "load_stage", "remove_keys", "table_schema",
           "upsert"]

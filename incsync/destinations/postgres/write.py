"""What a PostgreSQL publish writes, and how a reader sees the table: the table adapted and the upsert built
(a full refresh first deletes the rows the source lacks), the rows read back, the drift from a batch."""

from __future__ import annotations

import psycopg
import pyarrow as pa
from psycopg import sql

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.schema_change import SchemaDiff, pg_diff
from incsync.destinations.postgres.load import STAGE
from incsync.destinations.postgres.rows import create_table, upsert
from incsync.destinations.postgres.schema import Evolution, Published, evolve, published_columns, register, table_columns
from incsync.destinations.postgres.types import pg_type
from incsync.destinations.records import FULL_REFRESH, REPAIR, TransferRecord


def write_statement(
    conn: psycopg.Connection, schema: str, *, model: ModelConfig, recipient: RecipientConfig, batch_columns: list[str],
    wanted: dict[str, str], record: TransferRecord, where: str, current: dict[str, str] | None,
    published: Published | None,
) -> tuple[sql.Composed, int, Evolution]:
    """Adapt the table (``current``: its columns now, None without one), then return the upsert of the
    staged rows; a full refresh first deletes the rows it lacks.

    A full refresh's upsert also empties the columns the source dropped (a recipient's own columns
    keep their values). Returns (the upsert, rows deleted, what adapting the table did).
    """
    name = model.model_name
    target = sql.Identifier(schema, name)
    refresh = record.transfer_type == FULL_REFRESH
    force = refresh or record.transfer_type == REPAIR  # the batch's rows win whatever their dates
    if current is None:
        create_table(conn, target, model=model, wanted=wanted)
        register(conn, schema=schema, model=name, wanted=wanted, fresh=True)
        evolution = Evolution(drift=SchemaDiff(), applied=SchemaDiff())
    else:
        evolution = evolve(conn, schema=schema, table=name, current=current, wanted=wanted, published=published,
                           refresh=refresh, where=where, model=name, recipient=recipient.id)
    deleted = evolution.deleted
    if refresh and current is not None:
        conn.execute(sql.SQL("ANALYZE {}").format(STAGE))
        matches = sql.SQL(" AND ").join(sql.SQL("s.{c} = t.{c}").format(c=sql.Identifier(c)) for c in model.primary_key)
        gone = sql.SQL("DELETE FROM {target} AS t WHERE NOT EXISTS (SELECT 1 FROM {stage} AS s WHERE {m})")
        deleted += conn.execute(gone.format(target=target, stage=STAGE, m=matches)).rowcount
    stale = list(evolution.stale) if refresh else []
    return upsert(target, model=model, batch_columns=batch_columns, stale=stale, force=force), deleted, evolution


def read_table(conn: psycopg.Connection, schema: str, table: str) -> pa.Table:
    """Every row of ``schema.table``; empty before the first transfer."""
    if table_columns(conn, schema, table) is None:
        return pa.table({})
    cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
    names = [d.name for d in cur.description or []]
    rows = cur.fetchall()
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows]) if rows else pa.table({n: [] for n in names})


def stored_drift(conn: psycopg.Connection, schema: str, table: str, staged: pa.Schema) -> SchemaDiff | None:
    """What the next publish of a batch with schema ``staged`` would find; None before the first transfer."""
    current = table_columns(conn, schema, table)
    if current is None:
        return None
    published = published_columns(conn, schema, table)
    return pg_diff(published[0] if published else current, {f.name: pg_type(f) for f in staged})

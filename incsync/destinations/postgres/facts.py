"""What a state read or a publish must know of a recipient's schema, in one query once it is set up.

A schema that received a publish of a model holds its transfer log (``_incsync_transfers``), its owner
stamps (``_incsync_owners``), its column registry (``_incsync_columns``) and the model's table. Then
one statement reads everything a state read needs (the newest transfer record, the owner stamp, whether
the table exists and holds a row), and one, under the publish's advisory lock, everything a publish
checks (the newest transfer id for the lease, the owner stamp, the table's columns from the catalog,
the registry). Nothing is remembered between publishes but the fact that these tables exist: columns,
records and stamps are read again each time, so a table a recipient dropped or altered is seen as
exactly as before. A statement that meets a missing table (``UndefinedTable``) is the caller's cue to
take the careful path, one question at a time, as for a first transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from incsync.destinations.base import TransferRecord
from incsync.destinations.ownership import OWNERS_TABLE, Owner, pg_owner
from incsync.destinations.postgres.log import RECORD_COLUMNS, TRANSFERS_TABLE, last_record, record_from_row
from incsync.destinations.postgres.schema import COLUMNS_TABLE, Published, published_columns, table_columns


@dataclass(frozen=True)
class StateSeen:
    record: TransferRecord | None  # the newest transfer record of (model, recipient)
    stamp: Owner | None  # the model's newest owner stamp
    exists: bool  # the model's table
    has_data: bool
    settled: bool  # log, owner stamps and registry exist: a publish may read them in one statement


@dataclass(frozen=True)
class PublishSeen:
    transfer_id: str | None  # the newest transfer of (model, recipient), for the lease
    stamp: Owner | None
    columns: dict[str, str] | None  # the model's table (None: there is none)
    published: Published | None  # what the registry says incsync published


def _regclass(conn: psycopg.Connection, schema: str, table: str) -> str:
    return sql.Identifier(schema, table).as_string(conn)


_NEWEST = """
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT {record} FROM {log} WHERE model_name = %(model)s AND recipient_id = %(recipient)s
                   ORDER BY seq DESC LIMIT 1) AS r ON true
LEFT JOIN LATERAL (SELECT recipient_id, tenant, moved FROM {owners} WHERE model_name = %(model)s
                   ORDER BY seq DESC LIMIT 1) AS o ON true"""


def _newest(schema: str, record: list[str]) -> sql.Composed:
    return sql.SQL(_NEWEST).format(
        record=sql.SQL(", ").join(map(sql.Identifier, record)), log=sql.Identifier(schema, TRANSFERS_TABLE),
        owners=sql.Identifier(schema, OWNERS_TABLE))


def _stamp(model: str, recipient: str | None, tenant: str, moved: str | None) -> Owner | None:
    return None if recipient is None else Owner(recipient=recipient, tenant=tenant, model=model, moved=moved)


def read_state_seen(conn: psycopg.Connection, schema: str, *, model: str, recipient: str) -> StateSeen:
    """One statement; raises ``psycopg.errors.UndefinedTable`` unless the log, the stamps and the table exist."""
    query = sql.SQL(
        "SELECT {record}, o.recipient_id, o.tenant, o.moved, to_regclass(%(registry)s) IS NOT NULL, "
        "(SELECT c.relkind = 'r' FROM pg_class c WHERE c.oid = to_regclass(%(table)s)), EXISTS (SELECT 1 FROM {table})"
    ).format(record=sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(c)) for c in RECORD_COLUMNS),
             table=sql.Identifier(schema, model)) + _newest(schema, list(RECORD_COLUMNS))
    row = conn.execute(query, {"model": model, "recipient": recipient, "registry": _regclass(conn, schema, COLUMNS_TABLE),
                               "table": _regclass(conn, schema, model)}).fetchone()
    n = len(RECORD_COLUMNS)
    values = row[:n]
    record = None if values[0] is None else record_from_row(values)
    owner, tenant, moved, registry, is_table, has_rows = row[n:]
    exists = bool(is_table)
    return StateSeen(record=record, stamp=_stamp(model, owner, tenant, moved), exists=exists,
                     has_data=exists and bool(has_rows), settled=bool(registry))


def read_state_careful(conn: psycopg.Connection, schema: str, *, model: str, recipient: str) -> StateSeen:
    """The same, a question at a time: any of the tables may be missing."""
    record = last_record(conn, schema, model=model, recipient=recipient)
    exists = table_columns(conn, schema, model) is not None
    has_data = exists and bool(conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(schema, model))).fetchone()[0])
    return StateSeen(record=record, stamp=pg_owner(conn, schema, model), exists=exists, has_data=has_data, settled=False)


def publish_seen(conn: psycopg.Connection, schema: str, *, model: str, recipient: str) -> PublishSeen:
    """One statement (call it under the advisory lock); raises ``UndefinedTable`` unless the log, the
    stamps and the registry exist. The table's columns come from the catalog: a missing table is None."""
    query = sql.SQL(
        "SELECT r.transfer_id, o.recipient_id, o.tenant, o.moved, "
        "(SELECT json_agg(json_build_array(a.attname, format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum) "
        " FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid "
        " WHERE c.oid = to_regclass(%(table)s) AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped), "
        "(SELECT json_agg(json_build_array(column_name, column_type, in_source) ORDER BY column_name) "
        " FROM {registry} WHERE model_name = %(model)s)"
    ).format(registry=sql.Identifier(schema, COLUMNS_TABLE)) + _newest(schema, ["transfer_id"])
    row = conn.execute(query, {"model": model, "recipient": recipient, "table": _regclass(conn, schema, model)}).fetchone()
    transfer_id, owner, tenant, moved, columns, registered = row
    published = None
    if registered:
        published = ({c: t for c, t, live in registered if live}, tuple(c for c, _, live in registered if not live))
    return PublishSeen(transfer_id=transfer_id, stamp=_stamp(model, owner, tenant, moved),
                       columns={c: t for c, t in columns} if columns else None, published=published)


def publish_careful(conn: psycopg.Connection, schema: str, *, model: str, recipient: str) -> PublishSeen:
    """The same, a question at a time, for a schema being set up (a first transfer, a table recreated)."""
    last = last_record(conn, schema, model=model, recipient=recipient)
    return PublishSeen(transfer_id=last.transfer_id if last else None, stamp=pg_owner(conn, schema, model),
                       columns=table_columns(conn, schema, model), published=published_columns(conn, schema, model))

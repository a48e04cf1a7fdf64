"""``<schema>._incsync_transfers``: the transfer records of a PostgreSQL destination, one row per publish."""

from __future__ import annotations

import json
from datetime import datetime

import psycopg
from psycopg import sql

from incsync.destinations.base import TransferRecord
from incsync.destinations.postgres.schema import table_columns

TRANSFERS_TABLE = "_incsync_transfers"

_TRANSFERS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    seq bigserial UNIQUE,
    transfer_id text PRIMARY KEY,
    model_name text NOT NULL,
    recipient_id text NOT NULL,
    window_start timestamptz NOT NULL,
    window_end timestamptz NOT NULL,
    lower_bound timestamptz NOT NULL,
    upper_bound timestamptz NOT NULL,
    rows_transferred bigint NOT NULL,
    delta_rows_transferred bigint NOT NULL,
    high_watermark timestamptz,
    high_watermark_micros bigint,
    transfer_type text NOT NULL,
    fingerprint text NOT NULL,
    lookback_seconds integer NOT NULL,
    committed_at text NOT NULL,
    extra jsonb NOT NULL DEFAULT '{{}}'
)"""

RECORD_COLUMNS = (
    "transfer_id", "model_name", "recipient_id", "window_start", "window_end", "lower_bound", "upper_bound",
    "rows_transferred", "delta_rows_transferred", "high_watermark", "high_watermark_micros", "transfer_type",
    "fingerprint", "lookback_seconds", "committed_at", "extra",
)


def create_log(conn: psycopg.Connection, schema: str) -> None:
    conn.execute(sql.SQL(_TRANSFERS_DDL).format(table=sql.Identifier(schema, TRANSFERS_TABLE)))


def last_record(conn: psycopg.Connection, schema: str, *, model: str, recipient: str) -> TransferRecord | None:
    """The newest transfer record of (model, recipient); None before the first or without a log."""
    if table_columns(conn, schema, TRANSFERS_TABLE) is None:
        return None
    query = sql.SQL("SELECT {cols} FROM {table} WHERE model_name = %s AND recipient_id = %s ORDER BY seq DESC LIMIT 1").format(
        cols=sql.SQL(", ").join(map(sql.Identifier, RECORD_COLUMNS)), table=sql.Identifier(schema, TRANSFERS_TABLE)
    )
    row = conn.execute(query, [model, recipient]).fetchone()
    return None if row is None else record_from_row(row)


def record_from_row(row: tuple | list) -> TransferRecord:
    """A transfer record from the values of ``RECORD_COLUMNS``, in that order."""
    values = dict(zip(RECORD_COLUMNS, row, strict=True))
    for key in ("window_start", "window_end", "lower_bound", "upper_bound"):
        values[key] = values[key].isoformat()
    values.pop("high_watermark")
    return TransferRecord(**values)


def logged_recipients(conn: psycopg.Connection, schema: str, model: str) -> list[str]:
    """Every recipient the log has a transfer of ``model`` for."""
    query = sql.SQL("SELECT DISTINCT recipient_id FROM {} WHERE model_name = %s").format(sql.Identifier(schema, TRANSFERS_TABLE))
    return [r for (r,) in conn.execute(query, [model]).fetchall()]


def insert_record(conn: psycopg.Connection, schema: str, record: TransferRecord) -> None:
    values = [
        record.transfer_id, record.model_name, record.recipient_id,
        datetime.fromisoformat(record.window_start), datetime.fromisoformat(record.window_end),
        datetime.fromisoformat(record.lower_bound), datetime.fromisoformat(record.upper_bound),
        record.rows_transferred, record.delta_rows_transferred, record.high_watermark,
        record.high_watermark_micros, record.transfer_type, record.fingerprint, record.lookback_seconds,
        record.committed_at, json.dumps(record.extra),
    ]
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(schema, TRANSFERS_TABLE),
            sql.SQL(", ").join(map(sql.Identifier, RECORD_COLUMNS)),
            sql.SQL(", ").join([sql.Placeholder()] * len(RECORD_COLUMNS)),
        ),
        values,
    )

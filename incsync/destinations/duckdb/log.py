"""The bookkeeping tables of a DuckDB destination schema, written in the publish transaction.

``_incsync_transfers``: one row per publish, the record as JSON (the newest row of a (model, recipient)
is its state). ``_incsync_owners``: the owner stamps, newest row per model wins, earlier rows are the
log of moves (as a PostgreSQL destination keeps them).
"""

from __future__ import annotations

import duckdb

from incsync.destinations.base import TransferRecord
from incsync.destinations.ownership import Owner

TRANSFERS = "_incsync_transfers"
OWNERS = "_incsync_owners"


class Rows:
    """A statement's rows, fetched at once: DuckDB refuses the next statement while a result is unread."""

    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return self.rows


class Session:
    """A DuckDB connection whose ``execute`` reads each statement's rows before the next one runs."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def execute(self, statement: str, params: list | None = None) -> Rows:
        return Rows(self.con.execute(statement, params or []).fetchall())

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        return self.con.sql(query)

    def register(self, name: str, data: object) -> None:
        self.con.register(name, data)

    def unregister(self, name: str) -> None:
        self.con.unregister(name)


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table(schema: str, name: str) -> str:
    return f"{quote(schema)}.{quote(name)}"


def create_log(con: Session, schema: str) -> None:
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    con.execute(f"CREATE TABLE IF NOT EXISTS {table(schema, TRANSFERS)} (seq BIGINT NOT NULL, transfer_id VARCHAR NOT NULL, "
                "model_name VARCHAR NOT NULL, recipient_id VARCHAR NOT NULL, record VARCHAR NOT NULL)")
    con.execute(f"CREATE TABLE IF NOT EXISTS {table(schema, OWNERS)} (seq BIGINT NOT NULL, model_name VARCHAR NOT NULL, "
                "recipient_id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, stamped_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
                "reason VARCHAR NOT NULL, moved VARCHAR)")


def exists(con: Session, schema: str, name: str) -> bool:
    row = con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ? AND NOT temporary",
                      [schema, name]).fetchone()
    return bool(row and row[0])


def last_record(con: Session, schema: str, *, model: str, recipient: str) -> TransferRecord | None:
    if not exists(con, schema, TRANSFERS):
        return None
    row = con.execute(f"SELECT record FROM {table(schema, TRANSFERS)} WHERE model_name = ? AND recipient_id = ? "
                      "ORDER BY seq DESC LIMIT 1", [model, recipient]).fetchone()
    return None if row is None else TransferRecord.from_json(row[0])


def logged_recipients(con: Session, schema: str, model: str) -> list[str]:
    if not exists(con, schema, TRANSFERS):
        return []
    rows = con.execute(f"SELECT DISTINCT recipient_id FROM {table(schema, TRANSFERS)} WHERE model_name = ?", [model]).fetchall()
    return sorted(r[0] for r in rows)


def insert_record(con: Session, schema: str, record: TransferRecord) -> None:
    t = table(schema, TRANSFERS)
    con.execute(f"INSERT INTO {t} SELECT coalesce(max(seq), 0) + 1, ?, ?, ?, ? FROM {t}",
                [record.transfer_id, record.model_name, record.recipient_id, record.to_json()])


def owner(con: Session, schema: str, model: str) -> Owner | None:
    if not exists(con, schema, OWNERS):
        return None
    row = con.execute(f"SELECT recipient_id, tenant, moved FROM {table(schema, OWNERS)} WHERE model_name = ? "
                      "ORDER BY seq DESC LIMIT 1", [model]).fetchone()
    return None if row is None else Owner(recipient=row[0], tenant=row[1], model=model, moved=row[2])


def stamp(con: Session, schema: str, new: Owner, *, reason: str) -> None:
    t = table(schema, OWNERS)
    con.execute(f"INSERT INTO {t} (seq, model_name, recipient_id, tenant, reason, moved) "
                f"SELECT coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ? FROM {t}",
                [new.model, new.recipient, new.tenant, reason, new.moved])

"""The bookkeeping tables of a MariaDB destination database, written in the publish transaction (InnoDB).

``_incsync_transfers``: one row per publish, the record as JSON (the newest row of a (model, recipient)
is its state). ``_incsync_owners``: the owner stamps, the newest row per model wins, earlier rows are
the log of moves. ``_incsync_columns``: the columns incsync published per model with their Arrow type
(so a recipient's own columns are never taken for columns the source dropped, and a ``DATETIME``
column is known to hold UTC instants). ``_incsync_swaps``: a full refresh's bookkeeping while its
rebuilt table is swapped in (``swap``). DDL commits by itself in MariaDB: these tables are created
before a publish's transaction begins; their rows change only inside it.
"""

from __future__ import annotations

from incsync.destinations.base import TransferRecord
from incsync.destinations.mariadb.connect import Connection, quote, rows, run, table
from incsync.destinations.ownership import OWNERS_TABLE, Owner

TRANSFERS = "_incsync_transfers"
OWNERS = OWNERS_TABLE
COLUMNS = "_incsync_columns"
SWAPS = "_incsync_swaps"  # a full refresh's swap pending (incsync.destinations.mariadb.swap)

_NAME = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {c} NOT NULL"


def create_log(conn: Connection, database: str, collation: str) -> None:
    """The database and its bookkeeping tables, when missing (DDL: commits by itself)."""
    name = _NAME.format(c=collation)
    run(conn, f"CREATE DATABASE IF NOT EXISTS {quote(database)} CHARACTER SET utf8mb4")
    run(conn, f"CREATE TABLE IF NOT EXISTS {table(database, TRANSFERS)} (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
              f"transfer_id {name}, model_name {name}, recipient_id {name}, record LONGTEXT NOT NULL, "
              "KEY by_recipient (model_name, recipient_id, seq)) ENGINE=InnoDB")
    run(conn, f"CREATE TABLE IF NOT EXISTS {table(database, OWNERS)} (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
              f"model_name {name}, recipient_id {name}, tenant {name}, stamped_at DATETIME(6) NOT NULL DEFAULT NOW(6), "
              "reason TEXT NOT NULL, moved VARCHAR(255) NULL, KEY by_model (model_name, seq)) ENGINE=InnoDB")
    run(conn, f"CREATE TABLE IF NOT EXISTS {table(database, COLUMNS)} (model_name {name}, column_name "
              f"VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL, arrow_type VARCHAR(255) NOT NULL, "
              "in_source BOOLEAN NOT NULL, PRIMARY KEY (model_name, column_name)) ENGINE=InnoDB")
    run(conn, f"CREATE TABLE IF NOT EXISTS {table(database, SWAPS)} (model_name {name} PRIMARY KEY, transfer_id {name}, "
              f"recipient_id {name}, record LONGTEXT NOT NULL, bookkeeping LONGTEXT NOT NULL) ENGINE=InnoDB")


def exists(conn: Connection, database: str, name: str) -> bool:
    found = rows(conn, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                       "AND TABLE_TYPE = 'BASE TABLE'", [database, name])
    return bool(found[0][0])


def last_record(conn: Connection, database: str, *, model: str, recipient: str) -> TransferRecord | None:
    if not exists(conn, database, TRANSFERS):
        return None
    found = rows(conn, f"SELECT record FROM {table(database, TRANSFERS)} WHERE model_name = %s AND recipient_id = %s "
                       "ORDER BY seq DESC LIMIT 1", [model, recipient])
    return TransferRecord.from_json(found[0][0]) if found else None


def logged_recipients(conn: Connection, database: str, model: str) -> list[str]:
    if not exists(conn, database, TRANSFERS):
        return []
    found = rows(conn, f"SELECT DISTINCT recipient_id FROM {table(database, TRANSFERS)} WHERE model_name = %s", [model])
    return sorted(r[0] for r in found)


def insert_record(conn: Connection, database: str, record: TransferRecord) -> None:
    run(conn, f"INSERT INTO {table(database, TRANSFERS)} (transfer_id, model_name, recipient_id, record) "
              "VALUES (%s, %s, %s, %s)", [record.transfer_id, record.model_name, record.recipient_id, record.to_json()])


def owner(conn: Connection, database: str, model: str) -> Owner | None:
    if not exists(conn, database, OWNERS):
        return None
    found = rows(conn, f"SELECT recipient_id, tenant, moved FROM {table(database, OWNERS)} WHERE model_name = %s "
                       "ORDER BY seq DESC LIMIT 1", [model])
    return Owner(recipient=found[0][0], tenant=found[0][1], model=model, moved=found[0][2]) if found else None


def stamp(conn: Connection, database: str, new: Owner, *, reason: str) -> None:
    run(conn, f"INSERT INTO {table(database, OWNERS)} (model_name, recipient_id, tenant, reason, moved) "
              "VALUES (%s, %s, %s, %s, %s)", [new.model, new.recipient, new.tenant, reason, new.moved])


Published = tuple[dict[str, str], tuple[str, ...]]  # (column -> Arrow type the source had at the last publish, dropped since)


def published(conn: Connection, database: str, model: str) -> Published | None:
    """What the registry says incsync published of ``model``; None before the first publish (or without one)."""
    if not exists(conn, database, COLUMNS):
        return None
    found = rows(conn, f"SELECT column_name, arrow_type, in_source FROM {table(database, COLUMNS)} WHERE model_name = %s "
                       "ORDER BY column_name", [model])
    if not found:
        return None
    return {c: t for c, t, live in found if live}, tuple(c for c, _, live in found if not live)


def register(conn: Connection, database: str, model: str, types: dict[str, str], *, fresh: bool) -> None:
    """Record the columns this publish wrote (in its transaction); ``fresh``: the table was just created."""
    t = table(database, COLUMNS)
    if fresh:
        run(conn, f"DELETE FROM {t} WHERE model_name = %s", [model])
    run(conn, f"UPDATE {t} SET in_source = FALSE WHERE model_name = %s", [model])
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {t} (model_name, column_name, arrow_type, in_source) VALUES (%s, %s, %s, TRUE) "
                        "ON DUPLICATE KEY UPDATE arrow_type = VALUES(arrow_type), in_source = TRUE",
                        [(model, c, kind) for c, kind in types.items()])


def table_columns(conn: Connection, database: str, name: str) -> list[tuple[str, str, str, int | None, int | None]] | None:
    """(column, DATA_TYPE, COLUMN_TYPE, precision, scale) of a base table in order; None without one."""
    if not exists(conn, database, name):
        return None
    found = rows(conn, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE "
                       "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                       "ORDER BY ORDINAL_POSITION", [database, name])
    return [(c, str(d), str(ct), p, s) for c, d, ct, p, s in found]

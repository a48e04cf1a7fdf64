"""A full refresh that changes a column's type incompatibly: the new rows built beside the live table and
swapped in with one ``RENAME TABLE``, so readers never see the table empty or half-filled. The one rename
swap of a full refresh (docs/design.md#mariadb-retype-by-rename).

MariaDB cannot change a column's type inside a transaction, nor to a type the old values do not fit, so
such a refresh cannot be one transaction on the live table. Instead the new table is built beside it
(``CREATE TABLE ... LIKE``: its columns, the recipient's own among them, its indexes, options and
comment), altered to the new types and filled from the stage; a recipient's own columns keep their values
for the keys that stay. ``RENAME TABLE live TO parked, fresh TO live`` swaps the two atomically. Views and
grants name the table, so they follow the name; triggers move with a renamed table, so they are re-created
on the new one from their own statements. A table that takes part in a foreign key is refused before
anything is written (a key would follow the parked table): the error names the key and the fix.

RENAME is DDL and commits by itself, so the swap is the commit point of a publish in two steps: the
transfer's bookkeeping (its record, the column registry, the owner stamp, the triggers) is committed to
``_incsync_swaps`` before it and moved to the log in one transaction after it. A publish killed before the
swap leaves the live table as it was and the fresh one beside it: the pending row is discarded. Killed
after it, the fresh table is gone (it is the live one): ``last_record`` already returns the pending
record, and the next publish or ownership move, holding the (database, model) lock, settles it.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pymysql

from incsync.config.model import ModelConfig
from incsync.core.crashpoints import crash_point
from incsync.destinations.base import TransferRecord
from incsync.destinations.mariadb import log
from incsync.destinations.mariadb.connect import SQL_MODE, Connection, quote, rows, run, table
from incsync.destinations.mariadb.load import STAGE
from incsync.destinations.ownership import Owner
from incsync.errors import PublishError


def names(model: str) -> tuple[str, str]:
    """(fresh, parked): the new table while it is built, the old one between the swap and its drop."""
    digest = hashlib.sha1(model.encode()).hexdigest()[:24]  # table names stop at 64 characters
    return f"_incsync_new_{digest}", f"_incsync_old_{digest}"


def pending_record(conn: Connection, database: str, *, model: str, recipient: str) -> TransferRecord | None:
    """The record of a swap that happened but is not settled yet (None when there is none)."""
    found = _pending(conn, database, model)
    if found is None or found[1] != recipient or log.exists(conn, database, names(model)[0]):
        return None  # no swap pending for this recipient, or it never happened (the fresh table is still there)
    return TransferRecord.from_json(found[2])


def _pending(conn: Connection, database: str, model: str) -> tuple[str, str, str, str] | None:
    if not log.exists(conn, database, log.SWAPS):
        return None
    found = rows(conn, f"SELECT transfer_id, recipient_id, record, bookkeeping FROM {table(database, log.SWAPS)} "
                       "WHERE model_name = %s", [model])
    return tuple(found[0]) if found else None  # type: ignore[return-value]  # a row of the table's three columns


def refuse_foreign_keys(conn: Connection, database: str, name: str, *, where: str) -> None:
    """A table in a foreign key cannot be swapped: the key would follow the parked table, or be left behind."""
    found = rows(conn, "SELECT CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME "
                       "FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE (CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s) "
                       "OR (UNIQUE_CONSTRAINT_SCHEMA = %s AND REFERENCED_TABLE_NAME = %s) ORDER BY CONSTRAINT_NAME",
                 [database, name, database, name])
    if found:  # a key from another database names that database
        keys = ", ".join(f"{c} ({t if s == database else f'{s}.{t}'} -> {r})" for s, c, t, r in found)
        raise PublishError(f"{where}: this full refresh changes a column's type, which MariaDB can only do by building "
                           f"the table anew and swapping it in, and the table takes part in foreign key {keys}; nothing "
                           "was published. Fix: drop the foreign key, run the full refresh, then add it again.")


def rebuild(conn: Connection, database: str, model: ModelConfig, *, target: str, alter: list[str],
            columns: list[str], own: list[str]) -> tuple[str, int, int]:
    """Build the fresh table from the live one and the stage; (its name, rows written, old rows gone)."""
    fresh = table(database, names(model.model_name)[0])
    run(conn, f"DROP TABLE IF EXISTS {fresh}")
    run(conn, f"CREATE TABLE {fresh} LIKE {target}")
    if alter:
        run(conn, f"ALTER TABLE {fresh} {', '.join(alter)}")
    match = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in model.primary_key)
    first = quote(model.primary_key[0])
    picked = [*(f"s.{quote(c)}" for c in columns), *(f"t.{quote(c)}" for c in own)]
    written = run(conn, f"INSERT INTO {fresh} ({', '.join(map(quote, [*columns, *own]))}) SELECT {', '.join(picked)} "
                        f"FROM {table(database, STAGE)} AS s LEFT JOIN {target} AS t ON {match}")
    gone = rows(conn, f"SELECT COUNT(*) FROM {target} AS t LEFT JOIN {table(database, STAGE)} AS s ON {match} "
                      f"WHERE s.{first} IS NULL")[0][0]
    return fresh, written, int(gone)


def swap(conn: Connection, database: str, model: str, *, record: TransferRecord, types: dict[str, str],
         stamp: tuple[Owner, str] | None) -> None:
    """Commit the bookkeeping as pending, swap the fresh table in (the commit point), then settle."""
    fresh, parked = names(model)
    triggers = [{"mode": mode, "statement": statement} for mode, statement in _triggers(conn, database, model)]
    bookkeeping = {"types": types, "triggers": triggers,
                   "stamp": None if stamp is None else {"recipient": stamp[0].recipient, "tenant": stamp[0].tenant,
                                                        "moved": stamp[0].moved, "reason": stamp[1]}}
    run(conn, f"REPLACE INTO {table(database, log.SWAPS)} (model_name, transfer_id, recipient_id, record, bookkeeping) "
              "VALUES (%s, %s, %s, %s, %s)", [model, record.transfer_id, record.recipient_id, record.to_json(),
                                              json.dumps(bookkeeping)])
    conn.commit()
    crash_point("mid_publish")
    run(conn, f"DROP TABLE IF EXISTS {table(database, parked)}")
    run(conn, f"RENAME TABLE {table(database, model)} TO {table(database, parked)}, "
              f"{table(database, fresh)} TO {table(database, model)}")
    crash_point("mariadb_after_swap")
    settle(conn, database, model)


def settle(conn: Connection, database: str, model: str) -> None:
    """Finish (or discard) a swap a publish left pending, and drop what it left behind. Idempotent; call it
    holding the (database, model) lock."""
    fresh, parked = names(model)
    found = _pending(conn, database, model)
    if found is not None and not log.exists(conn, database, fresh):  # swapped: finish it
        transfer_id, _recipient, record, text = found
        bookkeeping = json.loads(text)
        run(conn, f"DROP TABLE IF EXISTS {table(database, parked)}")  # its triggers go with it
        run(conn, f"USE {quote(database)}")
        for trigger in bookkeeping["triggers"]:
            _recreate(conn, trigger)
        conn.begin()
        if bookkeeping["stamp"] is not None:
            s = bookkeeping["stamp"]
            log.stamp(conn, database, Owner(recipient=s["recipient"], tenant=s["tenant"], model=model, moved=s["moved"]),
                      reason=s["reason"])
        log.register(conn, database, model, bookkeeping["types"], fresh=False)  # a swap replaces an existing table
        log.insert_record(conn, database, TransferRecord.from_json(record))
        run(conn, f"DELETE FROM {table(database, log.SWAPS)} WHERE model_name = %s AND transfer_id = %s", [model, transfer_id])
        conn.commit()
        return
    if found is not None:  # never swapped: the live table is as it was
        run(conn, f"DELETE FROM {table(database, log.SWAPS)} WHERE model_name = %s", [model])
        conn.commit()
    # What a killed rebuild or settle left: dropped only when there (DDL on every publish is not free).
    left = rows(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN (%s, %s)",
                [database, fresh, parked])
    for (name,) in left:
        run(conn, f"DROP TABLE IF EXISTS {table(database, name)}")


def _triggers(conn: Connection, database: str, name: str) -> list[tuple[str, str]]:
    """(sql_mode, CREATE TRIGGER statement) of each trigger on the table, in their firing order."""
    found = rows(conn, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
                       "AND EVENT_OBJECT_TABLE = %s ORDER BY ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER",
                       [database, name])
    created = []
    for (trigger,) in found:
        shown = rows(conn, f"SHOW CREATE TRIGGER {table(database, trigger)}")[0]
        created.append((str(shown[1]), str(shown[2])))
    return created


def _recreate(conn: Connection, trigger: dict[str, str]) -> None:
    """Create a trigger the swap moved to the parked table on the live one (unless a settle did already)."""
    run(conn, "SET SESSION sql_mode = %s", [trigger["mode"]])
    try:
        run(conn, trigger["statement"])
    except pymysql.MySQLError as exc:
        if not exc.args or exc.args[0] != 1359:  # ER_TRG_ALREADY_EXISTS: an earlier settle made it
            raise
    finally:
        run(conn, "SET SESSION sql_mode = %s", [SQL_MODE])


def own_columns(current: pa.Schema, form: pa.Schema, known: set[str], stamp: str) -> list[str]:
    """The recipient's own columns of the live table: neither the source's nor incsync's."""
    return [c for c in current.names if c not in form.names and c not in known and c != stamp]

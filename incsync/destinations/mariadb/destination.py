"""MariaDB/MySQL destination: a database per recipient; ONE InnoDB transaction upserts and records the transfer.

A publish loads the staged rows into a temporary stage table (``load``), takes the (database, model)
lock (``GET_LOCK``: publishers take turns), checks that no other transfer committed since this one read
its state and that the table is this recipient's (the owner stamp), adapts the table in place (create,
``ADD COLUMN``, ``MODIFY COLUMN`` for a widening: DDL, which MariaDB commits by itself, so it comes
before the transaction and a retry finds it done), then in one transaction upserts with the
last-modified tie-break (``rows``), writes the owner stamp and column registry and inserts the transfer
record into ``<database>._incsync_transfers``. A full refresh deletes the rows the source no longer has
and upserts the rest in that transaction: readers see the old rows until it commits, and the table keeps
its identity (no DROP, no rename), so the views, grants and columns a recipient added survive. A full
refresh that changes a column's type in a way MariaDB cannot apply in place builds the new table beside
the live one and swaps it in with one ``RENAME TABLE`` (``swap``): readers see the old rows or the new,
never an empty table. Text columns use a binary NO PAD collation, so keys that differ in case or trailing
spaces stay apart.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pymysql

from incsync.config.destinations import MariaDBDestinationConfig
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.crashpoints import crash_point
from incsync.core.lease import check_lease
from incsync.core.schema_change import SchemaDiff, arrow_diff, change_metadata, incompatible_error
from incsync.destinations.base import (
    DELETED_AT,
    FULL_REFRESH,
    REPAIR,
    Capabilities,
    Destination,
    DestinationState,
    Location,
    Removals,
    TransferRecord,
    table_state,
)
from incsync.destinations.mariadb import log, swap
from incsync.destinations.mariadb.connect import Connection, collation, connect, lock, quote, rows, run, table
from incsync.destinations.mariadb.load import load_stage
from incsync.destinations.mariadb.read import read_table, table_schema
from incsync.destinations.mariadb.rows import alterations, create_table, delete_missing, remove_keys, upsert
from incsync.destinations.mariadb.types import json_columns, mariadb_form
from incsync.destinations.mariadb.vacancy import vacancy_problem
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import Owner, check_owner, owner_of, refuse_unstamped
from incsync.errors import ConfigError, LeaseError, OwnershipError, PublishError, SchemaError
from incsync.staging.batch import StagedBatch


def _without_stamp(schema: pa.Schema) -> pa.Schema:
    return schema.remove(schema.get_field_index(DELETED_AT)) if DELETED_AT in schema.names else schema


class MariaDBDestination(Destination):
    """Table ``<database>.<model_name>`` holds one recipient's copy; ``<database>._incsync_transfers`` its log."""

    kind = "mariadb"
    capabilities = Capabilities(lacks=(
        ("maintained", "InnoDB reclaims updated rows' space itself"),
        ("infinities", "incsync refuses ±infinity for every kind but PostgreSQL"),
    ))

    def __init__(self, config: MariaDBDestinationConfig) -> None:
        self.config = config
        self.name = config.name
        self.database = config.database

    def check(self) -> None:
        """Connect once (``incsync validate --connect``)."""
        with connect(self.config):
            pass

    def check_vacant(self, *, recipient: str) -> None:
        with connect(self.config) as conn:
            problem = vacancy_problem(conn, self.database, recipient)
        if problem is not None:
            raise ConfigError(f"destinations[{self.name}]", [problem])

    def table_name(self, model: ModelConfig) -> str:
        return f"{self.database}.{model.model_name}"

    def _where(self, model: ModelConfig) -> str:
        return f"MariaDB table {self.table_name(model)} (destination {self.name})"

    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        return Location(shown=f"`{self.database}`.`{model.model_name}`")

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        """Every row of the model's table (empty before the first transfer): what a reader of the copy sees."""
        with connect(self.config) as conn:
            return read_table(conn, self.database, model.model_name)

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer, checked against the table (dropped or emptied while the log stays, or the reverse)."""
        name = model.model_name
        with connect(self.config) as conn:
            record = _last_record(conn, self.database, model=name, recipient=recipient.id)
            exists = log.exists(conn, self.database, name)
            has_data = exists and bool(rows(conn, f"SELECT EXISTS (SELECT 1 FROM {table(self.database, name)})")[0][0])
            stamp = log.owner(conn, self.database, name)
        return table_state(f"table {self.table_name(model)}", record, stamp, exists=exists, has_data=has_data)

    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
        removals: Removals | None = None,
        new_keys: bool = False,  # an upsert here costs what an append would
    ) -> dict[str, object]:
        where = f"model {model.model_name}, recipient {recipient.id}"
        with connect(self.config, local_files=True) as conn:
            try:
                return self._publish(conn, model=model, recipient=recipient, batch=batch, record=record,
                                     expected=expected, removals=removals, where=where)
            except (LeaseError, SchemaError, OwnershipError, PublishError, ConfigError):
                conn.rollback()
                raise
            except pymysql.MySQLError as exc:
                try:
                    conn.rollback()
                except pymysql.MySQLError:
                    pass  # a lost connection cannot roll back: the server did
                raise PublishError(f"{where}: MariaDB publish to {self.table_name(model)} failed and no row or transfer "
                                   f"record was committed: {' '.join(str(exc).split())}") from exc

    def _publish(
        self, conn: Connection, *, model: ModelConfig, recipient: RecipientConfig, batch: StagedBatch,
        record: TransferRecord, expected: DestinationState, removals: Removals | None, where: str,
    ) -> dict[str, object]:
        name, db, key = model.model_name, self.database, tuple(model.primary_key)
        target = table(db, name)
        binary = collation(conn)
        form, nested = mariadb_form(batch.schema), json_columns(batch.schema)
        log.create_log(conn, db, binary)
        run(conn, f"USE {quote(db)}")  # multi-table DELETE resolves its aliases in the current database
        load_stage(conn, db, batch, form, key=key, collation=binary, where=where)
        lock(conn, db, name, where=self._where(model))
        conn.commit()  # read what publishers committed while this one waited, not an older snapshot
        swap.settle(conn, db, name)  # a swap an earlier publish left pending
        seen = log.last_record(conn, db, model=name, recipient=recipient.id)
        check_lease(model=name, recipient=recipient.id, where=self.table_name(model),
                    read=expected.last_transfer.transfer_id if expected.last_transfer else None,
                    now=seen.transfer_id if seen else None)
        registered = log.published(conn, db, name)
        zoned = {f.name for f in form if pa.types.is_timestamp(f.type) and f.type.tz}
        current = table_schema(conn, db, name, registered, zoned=zoned if registered is None else set())
        stamp_reason = self._claim(conn, model=model, recipient=recipient, exists=current is not None,
                                   transfer_id=record.transfer_id)
        refresh = record.transfer_type == FULL_REFRESH
        soft = removals is not None and removals.mode == "soft" and removals.rows > 0
        deleted, stale, has_stamp, rebuilt = 0, [], False, False
        # Nested columns keep their Arrow type here, so readers give their JSON back as lists and structs.
        types = {f.name: str(batch.schema.field(f.name).type if f.name in nested else f.type) for f in form}
        if current is None:  # no rows to remove either
            create_table(conn, target, form, key=key, json=nested, collation=binary)
            drift = applied = SchemaDiff()
        else:
            has_stamp = DELETED_AT in current.names
            mine = _without_stamp(current)
            known = set(registered[0]) if registered is not None else set(mine.names)
            gone = registered[1] if registered is not None else ()
            applied = arrow_diff(mine, form)
            drift = arrow_diff(pa.schema([f for f in mine if f.name in known]), form)
            if applied.incompatible and not refresh:
                raise incompatible_error(where, self.table_name(model), applied.incompatible, model=name, recipient=recipient.id)
            rebuilt = bool(applied.incompatible)
            alter = alterations(form, applied, key=key, json=nested, collation=binary, soft_stamp=soft and not has_stamp)
            if rebuilt:  # MariaDB cannot retype in place: build the new table beside the live one
                swap.refuse_foreign_keys(conn, db, name, where=f"{where}: {self.table_name(model)}")
                target, written, deleted = swap.rebuild(conn, db, model, target=target, alter=alter, columns=form.names,
                                                        own=swap.own_columns(mine, form, known | set(gone), DELETED_AT))
            elif alter:
                run(conn, f"ALTER TABLE {target} {', '.join(alter)}")
            has_stamp = has_stamp or soft
            if refresh:
                stale = [c for c in dict.fromkeys([*drift.dropped, *gone]) if c in mine.names and c not in form.names]
        conn.begin()
        if refresh and current is not None and not rebuilt:
            deleted += delete_missing(conn, db, target, model)
        if not rebuilt:
            written = upsert(conn, db, target, model=model, columns=form.names, stale=stale,
                             force=refresh or record.transfer_type == REPAIR)
        removed = 0
        if removals is not None:
            removed = remove_keys(conn, db, target, model=model, removals=removals, form=form, has_stamp=has_stamp,
                                  collation=binary)
        if rebuilt:  # the swap is the commit point; the bookkeeping is written pending before it
            swap.swap(conn, db, name, record=record, types=types,
                      stamp=None if stamp_reason is None else (owner_of(model, recipient), stamp_reason))
        else:
            crash_point("mid_publish")
            if stamp_reason is not None:
                log.stamp(conn, db, owner_of(model, recipient), reason=stamp_reason)
            if registered is None or registered[0] != types:
                log.register(conn, db, name, types, fresh=current is None)
            log.insert_record(conn, db, record)
            conn.commit()
        metadata: dict[str, object] = {"mariadb_table": self.table_name(model), "mariadb_rows_written": written,
                                       OWNER_KEY: recipient.id}
        if refresh:
            metadata["mariadb_rows_deleted"] = deleted
        if removals is not None:
            metadata["rows_removed"] = removed
        return {**metadata, **change_metadata(drift, replace(applied, dropped=drift.dropped), replaced=refresh)}

    def _claim(self, conn: Connection, *, model: ModelConfig, recipient: RecipientConfig, exists: bool,
               transfer_id: str) -> str | None:
        """Check the owner stamp; on a first transfer (or an adoption of a table whose log names only this
        recipient) return why the publish transaction stamps it."""
        me = owner_of(model, recipient)
        stamp = log.owner(conn, self.database, model.model_name)
        if stamp is not None:
            check_owner(stamp, me, where=self._where(model))
            return None
        logged = log.logged_recipients(conn, self.database, model.model_name)
        others = [r for r in logged if r != recipient.id]
        if others or (recipient.id not in logged and exists):
            raise refuse_unstamped(me, where=self._where(model), others=others)
        return f"adopted by transfer {transfer_id}: its log names only {recipient.id}" if logged else f"first transfer {transfer_id}"

    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        """What a publish of a batch with schema ``staged`` would find (``incsync validate --connect``);
        None before the first transfer."""
        with connect(self.config) as conn:
            registered = log.published(conn, self.database, model.model_name)
            current = table_schema(conn, self.database, model.model_name, registered)
        if current is None:
            return None
        mine = _without_stamp(current)
        known = set(registered[0]) if registered is not None else set(mine.names)
        return arrow_diff(pa.schema([f for f in mine if f.name in known]), mariadb_form(staged))

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with connect(self.config) as conn:
            log.create_log(conn, self.database, collation(conn))
            lock(conn, self.database, model.model_name, where=self._where(model))
            swap.settle(conn, self.database, model.model_name)
            conn.begin()
            previous = log.owner(conn, self.database, model.model_name)
            last = log.last_record(conn, self.database, model=model.model_name, recipient=recipient.id)
            log.stamp(conn, self.database, replace(owner_of(model, recipient), moved=last.transfer_id if last else ""),
                      reason=reason)
            conn.commit()
        return previous


def _last_record(conn: Connection, database: str, *, model: str, recipient: str) -> TransferRecord | None:
    """The last transfer: a swap that happened and is not settled yet is newer than the log's last record."""
    return (swap.pending_record(conn, database, model=model, recipient=recipient)
            or log.last_record(conn, database, model=model, recipient=recipient))

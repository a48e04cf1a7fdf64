"""DuckDB destination: a database file; ONE transaction adapts the table, upserts and records the transfer.

The staged rows are loaded into a temporary table, then one transaction checks that no other transfer
committed since this one read its state, checks (or stamps) the owner, adapts the table in place (create,
ADD COLUMN, ALTER COLUMN TYPE for a widening), upserts with the last-modified tie-break and inserts the
transfer record into ``<schema>._incsync_transfers``. A full refresh deletes the rows the source no longer
has and upserts the rest in that transaction: the table keeps its identity (no DROP, no rename), so views
a recipient built on it survive. DuckDB lets one process write a file at a time: the destination's
``max_concurrent_transfers`` stays 1, and a reader's lock is waited for (``file``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import duckdb
import pyarrow as pa

from incsync.config.destinations import DuckDBDestinationConfig
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
from incsync.destinations.duckdb import file, log
from incsync.destinations.duckdb.log import Session
from incsync.destinations.duckdb.rows import adapt, delete_missing, duckdb_form, load_stage, remove_keys, table_schema, upsert
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import Owner, check_owner, owner_of, refuse_unstamped
from incsync.errors import LeaseError, OwnershipError, PublishError, SchemaError
from incsync.staging.batch import StagedBatch


class DuckDBDestination(Destination):
    """Table ``<schema>.<model_name>`` of the file ``path`` holds one recipient's copy."""

    kind = "duckdb"
    capabilities = Capabilities(one_writer=True, lacks=(
        ("maintained", "DuckDB reclaims a file's free blocks itself"),
        ("infinities", "incsync refuses ±infinity for every kind but PostgreSQL"),
    ))

    def __init__(self, config: DuckDBDestinationConfig) -> None:
        self.config = config
        self.name = config.name
        self.path = config.path
        self.schema = config.schema_name

    @contextlib.contextmanager
    def connect(self) -> Iterator[Session]:
        """A connection to the file for the ``with`` block, in UTC, closed after it (DuckDB locks the file
        for one writing process while a connection is open; within this process, one block at a time)."""
        file.make_folder(self.path, destination=self.name)
        with file.file_lock(self.path), self._open() as session:
            yield session

    @contextlib.contextmanager
    def _open(self) -> Iterator[Session]:
        con = file.connect(self.path, destination=self.name, lock_timeout=self.config.lock_timeout_seconds)
        try:
            session = Session(con)
            session.execute("SET TimeZone = 'UTC'")
            yield session
        finally:
            con.close()

    def check(self) -> None:
        """Open the file once (``incsync validate --connect``)."""
        with self.connect():
            pass

    def target(self, model: ModelConfig) -> str:
        return log.table(self.schema, model.model_name)

    def table_name(self, model: ModelConfig) -> str:
        return f"{self.schema}.{model.model_name}"

    def _where(self, model: ModelConfig) -> str:
        return f"DuckDB table {self.table_name(model)} of {self.path} (destination {self.name})"

    def has_table(self, con: Session, model: ModelConfig) -> bool:
        return log.exists(con, self.schema, model.model_name)

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer, checked against the table (dropped or emptied while the log stays, or the reverse)."""
        with self.connect() as con:
            record = log.last_record(con, self.schema, model=model.model_name, recipient=recipient.id)
            exists = self.has_table(con, model)
            has_data = exists and bool(con.execute(f"SELECT EXISTS (SELECT 1 FROM {self.target(model)})").fetchone()[0])
            stamp = log.owner(con, self.schema, model.model_name)
        return table_state(f"table {self.table_name(model)} of {self.path}", record, stamp, exists=exists, has_data=has_data)

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
        with self.connect() as con:
            try:
                form = load_stage(con, batch)
                con.execute("BEGIN TRANSACTION")
                metadata = self._transaction(con, model=model, recipient=recipient, form=form, record=record,
                                             expected=expected, removals=removals, where=where)
                con.execute("COMMIT")
            except (LeaseError, SchemaError, OwnershipError):
                con.execute("ROLLBACK")
                raise
            except duckdb.Error as exc:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise PublishError(f"{where}: DuckDB publish to {self.table_name(model)} of {self.path} failed and nothing "
                                   f"was committed: {exc}") from exc
        return metadata

    def _transaction(
        self, con: Session, *, model: ModelConfig, recipient: RecipientConfig, form: pa.Schema, record: TransferRecord,
        expected: DestinationState, removals: Removals | None, where: str,
    ) -> dict[str, object]:
        name, target = model.model_name, self.target(model)
        log.create_log(con, self.schema)
        seen = log.last_record(con, self.schema, model=name, recipient=recipient.id)
        check_lease(model=name, recipient=recipient.id, where=self.table_name(model),
                    read=expected.last_transfer.transfer_id if expected.last_transfer else None,
                    now=seen.transfer_id if seen else None)
        exists = self.has_table(con, model)
        self._claim(con, model=model, recipient=recipient, exists=exists, transfer_id=record.transfer_id)
        refresh = record.transfer_type == FULL_REFRESH
        deleted = 0
        if not exists:
            con.execute(f"CREATE TABLE {target} AS SELECT * FROM incsync_stage LIMIT 0")
            change = applied = arrow_diff(form, form)
        else:
            current = table_schema(con, target)
            change = arrow_diff(pa_without_stamp(current), form)
            if change.incompatible and not refresh:
                raise incompatible_error(where, self.table_name(model), change.incompatible, model=name, recipient=recipient.id)
            deleted = adapt(con, target, change, refresh=refresh)
            applied = change
        if refresh and exists:
            deleted += delete_missing(con, target, model)
        stale = list(change.dropped) if refresh else []
        written = upsert(con, target, model=model, columns=form.names, stale=stale,
                         force=refresh or record.transfer_type == REPAIR)
        removed = remove_keys(con, target, model=model, removals=removals) if removals is not None else 0
        crash_point("mid_publish")
        log.insert_record(con, self.schema, record)
        metadata: dict[str, object] = {"duckdb_table": self.table_name(model), "duckdb_rows_written": written,
                                       OWNER_KEY: recipient.id}
        if refresh:
            metadata["duckdb_rows_deleted"] = deleted
        if removals is not None:
            metadata["rows_removed"] = removed
        return {**metadata, **change_metadata(change, applied, replaced=refresh)}

    def _claim(self, con: Session, *, model: ModelConfig, recipient: RecipientConfig, exists: bool,
               transfer_id: str) -> None:
        """Check the owner stamp, or write it on a first transfer (or an adoption of a table whose log
        names only this recipient)."""
        me = owner_of(model, recipient)
        stamp = log.owner(con, self.schema, model.model_name)
        if stamp is not None:
            check_owner(stamp, me, where=self._where(model))
            return
        logged = log.logged_recipients(con, self.schema, model.model_name)
        others = [r for r in logged if r != recipient.id]
        if others or (recipient.id not in logged and exists):
            raise refuse_unstamped(me, where=self._where(model), others=others)
        reason = f"adopted by transfer {transfer_id}: its log names only {recipient.id}" if logged else f"first transfer {transfer_id}"
        log.stamp(con, self.schema, me, reason=reason)

    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        return Location(shown=f'{self.path} "{self.schema}"."{model.model_name}"')

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        with self.connect() as con:  # the recipient owns the file's table
            if not self.has_table(con, model):
                return pa.table({})
            return con.sql(f"SELECT * FROM {self.target(model)}").to_arrow_table()

    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        """What a publish of a batch with schema ``staged`` would find (``incsync validate --connect``);
        None before the first transfer."""
        with self.connect() as con:
            if not self.has_table(con, model):
                return None
            current = table_schema(con, self.target(model))
        return arrow_diff(pa_without_stamp(current), duckdb_form(staged))

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            log.create_log(con, self.schema)
            previous = log.owner(con, self.schema, model.model_name)
            last = log.last_record(con, self.schema, model=model.model_name, recipient=recipient.id)
            log.stamp(con, self.schema, replace(owner_of(model, recipient), moved=last.transfer_id if last else ""), reason=reason)
            con.execute("COMMIT")
        return previous


def pa_without_stamp(schema: pa.Schema) -> pa.Schema:
    """The table's columns as a batch would bring them: the soft-delete stamp is incsync's own."""
    return schema.remove(schema.get_field_index(DELETED_AT)) if DELETED_AT in schema.names else schema

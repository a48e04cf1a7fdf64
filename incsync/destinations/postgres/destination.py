"""PostgreSQL destination: COPY into a temp table, then ONE transaction upserts and records the transfer.

The publish transaction takes an advisory lock on (schema, model), checks that no other transfer
committed since this one read its state, adapts the table in place (create, ADD COLUMN, ALTER COLUMN
TYPE for a widening: see ``postgres_schema``), upserts with the last-modified tie-break and inserts the
transfer record into ``<schema>._incsync_transfers`` (``postgres_log``). A full refresh loads its rows
into the temp table (``postgres_load``) beside the live one, then in that one transaction deletes the
rows the source no longer has and upserts the rest: the table's contents are replaced, never its
identity (no DROP, no rename, no TRUNCATE), so readers are never blocked and a snapshot reader sees
the old rows or the new.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from incsync.config.destinations import PostgresDestinationConfig
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.crashpoints import crash_point
from incsync.core.lease import check_lease
from incsync.core.schema_change import SchemaDiff
from incsync.destinations.base import (
    FULL_REFRESH,
    INCREMENTAL,
    Capabilities,
    Destination,
    DestinationState,
    Location,
    Removals,
    TransferRecord,
    table_state,
)
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import Owner, owner_of, pg_claim, pg_owner, pg_stamp
from incsync.destinations.postgres.facts import publish_careful, publish_seen, read_state_careful, read_state_seen
from incsync.destinations.postgres.load import STAGE, copy_rows, create_stage
from incsync.destinations.postgres.log import create_log, insert_record, last_record, logged_recipients
from incsync.destinations.postgres.pool import close_pool, connection
from incsync.destinations.postgres.rows import remove_keys
from incsync.destinations.postgres.schema import Evolution, table_columns
from incsync.destinations.postgres.types import pg_type
from incsync.destinations.postgres.vacancy import vacancy_problem
from incsync.destinations.postgres.verify import PostgresRowHashes
from incsync.destinations.postgres.write import read_table, stored_drift, write_statement
from incsync.errors import ConfigError, LeaseError, OwnershipError, PublishError, SchemaError
from incsync.secrets.stores import open_secret
from incsync.staging.batch import StagedBatch


def _advisory_key(schema: str, model: str) -> str:
    return f"incsync:{schema}.{model}"


def _lock(conn: psycopg.Connection, key: str) -> None:
    """Take the (schema, model) advisory lock, then make this session forget what it knew of the catalog.

    A pooled session may have looked the schema's tables up before (a state read) and cached that
    they did not exist; a publisher that held the lock may have created them since this transaction
    began. PostgreSQL drops such stale entries when a transaction takes a new kind of lock on a
    relation, and an advisory lock is not one: so lock the stage table (private to this session) in
    a mode this transaction has not taken yet.
    """
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
    conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(STAGE))


class PostgresDestination(Destination):
    """Table ``<schema>.<model_name>`` holds one recipient's copy; ``<schema>._incsync_transfers`` its log."""

    kind = "postgres"
    capabilities = Capabilities(
        appends_new_keys=True,  # a COPY into the table itself: half the server's work of stage + INSERT ... ON CONFLICT
        infinities=True, native_hashing="postgres", lacks=(("maintained", "the server's autovacuum reclaims space"),),
    )

    def __init__(self, config: PostgresDestinationConfig) -> None:
        self.config = config
        self.name = config.name
        self.schema = config.schema_name
        # Models whose log, owner stamps and column registry this process last saw in the schema: a
        # publish of one checks everything in one statement (``facts``).
        self._settled: set[str] = set()

    @contextlib.contextmanager
    def connect(self, *, autocommit: bool = False) -> Iterator[psycopg.Connection]:
        """A connection of this server's pool (``postgres_pool``) for the ``with`` block: committed at
        its end, rolled back on an error, then returned to the pool (``autocommit``: for reads in one
        statement, which then need no BEGIN and COMMIT)."""
        dsn_ref = self.config.dsn_ref
        used_by = f"destinations[{self.name}].{self.config.dsn_field}"
        dsn = open_secret(dsn_ref, used_by=used_by, what="the DSN").get_secret_value()
        try:
            password = conninfo_to_dict(dsn).get("password")
        except psycopg.ProgrammingError:  # its message quotes the DSN: never show it
            raise ConfigError(
                "environment" if dsn_ref.store == "env" else "vault",
                [f"{used_by}: {dsn_ref.shown} is not a PostgreSQL connection string "
                 "(postgresql://user@host:port/dbname or key=value pairs)"],
            ) from None
        with connection(dsn, password=str(password) if password else None, destination=self.name,
                        dsn_from=dsn_ref.shown, autocommit=autocommit) as conn:
            yield conn

    def check(self) -> None:
        """Connect once (``incsync validate --connect``); raises ConfigError/PublishError naming the setting."""
        with self.connect():
            pass

    def close(self) -> None:
        close_pool(open_secret(self.config.dsn_ref, used_by=self.name).get_secret_value())

    def check_vacant(self, *, recipient: str) -> None:
        with self.connect(autocommit=True) as conn:
            problem = vacancy_problem(conn, self.schema, recipient)
        if problem is not None:
            raise ConfigError(f"destinations[{self.name}]", [problem])

    def _ident(self, table: str) -> sql.Composed:
        return sql.Identifier(self.schema, table)

    def table_name(self, model: ModelConfig) -> str:
        return f"{self.schema}.{model.model_name}"

    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        return Location(shown=f'"{self.schema}"."{model.model_name}"')

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        with self.connect() as conn:  # the recipient owns the schema's table
            return read_table(conn, self.schema, model.model_name)

    def stored_schema(self, *, model: ModelConfig, recipient: RecipientConfig) -> dict[str, str] | None:
        with self.connect(autocommit=True) as conn:
            return self._columns(conn, model.model_name)

    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        with self.connect(autocommit=True) as conn:
            return stored_drift(conn, self.schema, model.model_name, staged)

    def row_hashes(self, *, model: ModelConfig, recipient: RecipientConfig) -> PostgresRowHashes:
        return PostgresRowHashes(self, model=model, recipient=recipient)

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer, checked against the table (dropped or emptied while the log stays, or the reverse).

        One statement once the schema is set up (``postgres_facts``); a question at a time otherwise.
        """
        name = model.model_name
        with self.connect(autocommit=True) as conn:
            try:
                seen = read_state_seen(conn, self.schema, model=name, recipient=recipient.id)
            except psycopg.errors.UndefinedTable:  # a first transfer, or a table gone: ask one thing at a time
                seen = read_state_careful(conn, self.schema, model=name, recipient=recipient.id)
        if seen.settled:
            self._settled.add(name)
        else:
            self._settled.discard(name)
        return table_state(f"table {self.table_name(model)}", seen.record, seen.stamp, exists=seen.exists,
                           has_data=seen.has_data)

    def _columns(self, conn: psycopg.Connection, table: str) -> dict[str, str] | None:
        return table_columns(conn, self.schema, table)

    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
        removals: Removals | None = None,
        new_keys: bool = False,
    ) -> dict[str, object]:
        where = f"model {model.model_name}, recipient {recipient.id}"
        wanted = {f.name: pg_type(f) for f in batch.schema}
        with self.connect() as conn:
            try:
                settled = model.model_name in self._settled
                args = dict(model=model, recipient=recipient, batch=batch, wanted=wanted, record=record,
                            expected=expected, removals=removals, where=where, new_keys=new_keys)
                try:
                    written, deleted, evolution, removed = self._transaction(conn, settled=settled, **args)
                except psycopg.errors.UndefinedTable:
                    if not settled:
                        raise
                    # A table of the schema went since it was last seen: nothing was committed; set it up again.
                    conn.rollback()
                    written, deleted, evolution, removed = self._transaction(conn, settled=False, **args)
                self._settled.add(model.model_name)  # the log, stamps and registry exist now
            except (LeaseError, SchemaError, OwnershipError):
                conn.rollback()
                raise
            except psycopg.Error as exc:
                with contextlib.suppress(psycopg.Error):  # a killed connection cannot roll back: the server did
                    conn.rollback()
                raise PublishError(
                    f"{where}: PostgreSQL publish to {self.table_name(model)} failed and nothing was committed: "
                    f"{str(exc).strip()}"
                ) from exc
        metadata: dict[str, object] = {"postgres_table": self.table_name(model), "postgres_rows_written": written,
                                       OWNER_KEY: recipient.id}
        if record.transfer_type == FULL_REFRESH:
            metadata["postgres_rows_deleted"] = deleted
        if removals is not None:
            metadata["rows_removed"] = removed
        return {**metadata, **evolution.metadata(refresh=record.transfer_type == FULL_REFRESH)}

    def _transaction(
        self, conn: psycopg.Connection, *, model: ModelConfig, recipient: RecipientConfig, batch: StagedBatch,
        wanted: dict[str, str], record: TransferRecord, expected: DestinationState, removals: Removals | None,
        where: str, settled: bool, new_keys: bool,
    ) -> tuple[int, int, Evolution, int]:
        """The publish transaction: COPY into the stage, the advisory lock, the checks, the writes, the
        record, the commit. ``settled``: the schema's log, stamps and registry existed at the last look,
        so one statement reads what the checks need and no DDL sets them up (a missing one raises
        ``UndefinedTable``: nothing is committed).

        A recipient's first transfer into a table that does not exist yet, and the later commits of its
        first backfill (``new_keys``), COPY straight into the table under the lock: no stage copy, no
        ``ON CONFLICT``. The batch's keys are unique (``validate_and_count``), and a key the table held
        after all would fail the COPY, and with it the whole transaction."""
        name = model.model_name
        direct = removals is None and (new_keys or expected.last_transfer is None)
        create_stage(conn, wanted)  # an empty stage still fences the catalog (``_lock``)
        if not direct:
            copy_rows(conn, batch, wanted, into=STAGE)
        with conn.pipeline():  # the lock, then (once settled) the read: one round trip
            _lock(conn, _advisory_key(self.schema, name))
            if settled:
                seen = publish_seen(conn, self.schema, model=name, recipient=recipient.id)
        if not settled:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            create_log(conn, self.schema)
            seen = publish_careful(conn, self.schema, model=name, recipient=recipient.id)
        was = expected.last_transfer.transfer_id if expected.last_transfer else None
        check_lease(model=name, recipient=recipient.id, where=self.table_name(model), read=was, now=seen.transfer_id)
        pg_claim(
            conn, self.schema, owner_of(model, recipient), stamp=seen.stamp, where=self._where(model),
            table_exists=lambda: seen.columns is not None,
            recipients_logged=lambda: logged_recipients(conn, self.schema, name),
            transfer_id=record.transfer_id,
        )
        if direct and not (seen.columns is None or (new_keys and record.transfer_type == INCREMENTAL)):
            direct = False  # the table exists and may hold the batch's keys: upsert from the stage
            copy_rows(conn, batch, wanted, into=STAGE)
        statement, deleted, evolution = write_statement(
            conn, self.schema, model=model, recipient=recipient, batch_columns=list(wanted), wanted=wanted, record=record, where=where,
            current=seen.columns, published=seen.published)
        if direct:
            exact = seen.columns is None or all(seen.columns.get(c, t) == t for c, t in wanted.items())
            copy_rows(conn, batch, wanted, into=self._ident(name), exact=exact)
            crash_point("mid_publish")
            insert_record(conn, self.schema, record)
            conn.commit()
            return batch.rows, deleted, evolution, 0
        if removals is not None:  # COPY of the keys: not in a pipeline
            written = conn.execute(statement).rowcount
            removed = remove_keys(conn, self._ident(name), model=model, removals=removals,
                                  columns=lambda: self._columns(conn, name))
            crash_point("mid_publish")
            insert_record(conn, self.schema, record)
            conn.commit()
            return written, deleted, evolution, removed
        with conn.pipeline():  # the upsert, the record and the commit in one round trip
            cursor = conn.execute(statement)
            crash_point("mid_publish")
            insert_record(conn, self.schema, record)
            conn.commit()
        return cursor.rowcount, deleted, evolution, 0

    def _where(self, model: ModelConfig) -> str:
        return f"PostgreSQL table {self.table_name(model)} (destination {self.name})"

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with self.connect() as conn:
            # A stage table of its own, private to this transaction, for ``_lock`` to fence the catalog with.
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(STAGE))
            conn.execute(sql.SQL("CREATE TEMP TABLE {} () ON COMMIT DROP").format(STAGE))
            _lock(conn, _advisory_key(self.schema, model.model_name))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            previous = pg_owner(conn, self.schema, model.model_name)
            last = last_record(conn, self.schema, model=model.model_name, recipient=recipient.id)
            new = replace(owner_of(model, recipient), moved=last.transfer_id if last else "")
            pg_stamp(conn, self.schema, new, reason=reason)
            conn.commit()
        return previous

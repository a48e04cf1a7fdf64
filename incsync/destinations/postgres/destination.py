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
import os
from collections.abc import Iterator
from dataclasses import replace

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.config.destinations import PostgresDestinationConfig
from incsync.core.crashpoints import crash_point
from incsync.destinations.base import (
    DELETED_AT,
    FULL_REFRESH,
    REPAIR,
    Destination,
    DestinationState,
    Removals,
    TransferRecord,
    reset_reason,
)
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import Owner, owner_of, pg_claim, pg_owner, pg_stamp
from incsync.destinations.postgres.load import STAGE, load_stage
from incsync.destinations.postgres.log import create_log, insert_record, last_record, logged_recipients
from incsync.destinations.postgres.pool import connection
from incsync.destinations.postgres.schema import Evolution, evolve, register, table_columns
from incsync.destinations.postgres.types import pg_type
from incsync.errors import ConfigError, LeaseError, OwnershipError, PublishError, SchemaError
from incsync.core.lease import check_lease
from incsync.core.schema_change import SchemaDiff
from incsync.staging.batch import StagedBatch


def _advisory_key(schema: str, model: str) -> str:
    return f"incsync:{schema}.{model}"


class PostgresDestination(Destination):
    """Table ``<schema>.<model_name>`` holds one recipient's copy; ``<schema>._incsync_transfers`` its log."""

    kind = "postgres"

    def __init__(self, config: PostgresDestinationConfig):
        self.config = config
        self.name = config.name
        self.schema = config.schema_name

    @contextlib.contextmanager
    def _connect(self) -> Iterator[psycopg.Connection]:
        """A connection of this server's pool (``postgres_pool``) for the ``with`` block: committed at
        its end, rolled back on an error, then returned to the pool."""
        dsn = os.environ.get(self.config.dsn_env)
        if dsn is None:
            raise ConfigError(
                "environment",
                [f"destinations[{self.name}].dsn_env: variable {self.config.dsn_env} is not set; export the DSN in it"],
            )
        try:
            password = conninfo_to_dict(dsn).get("password")
        except psycopg.ProgrammingError:  # its message quotes the DSN: never show it
            raise ConfigError(
                "environment",
                [f"destinations[{self.name}].dsn_env: ${self.config.dsn_env} is not a PostgreSQL connection string "
                 "(postgresql://user@host:port/dbname or key=value pairs)"],
            ) from None
        with connection(dsn, password=str(password) if password else None, destination=self.name,
                        dsn_env=self.config.dsn_env) as conn:
            yield conn

    def check(self) -> None:
        """Connect once (``incsync validate --connect``); raises ConfigError/PublishError naming the setting."""
        with self._connect():
            pass

    def _ident(self, table: str) -> sql.Composed:
        return sql.Identifier(self.schema, table)

    def table_name(self, model: ModelConfig) -> str:
        return f"{self.schema}.{model.model_name}"

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer, checked against the table (dropped or emptied while the log stays, or the reverse)."""
        with self._connect() as conn:
            record = last_record(conn, self.schema, model=model.model_name, recipient=recipient.id)
            exists = self._columns(conn, model.model_name) is not None
            has_data = exists and bool(conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(self._ident(model.model_name))).fetchone()[0])
            stamp = pg_owner(conn, self.schema, model.model_name)
        missing = stamp.moved_reason(record.transfer_id if record else None) if stamp else None
        if not missing and record is not None and record.high_watermark_micros is not None and not exists:
            missing = f"table {self.table_name(model)} was dropped while its transfer log records transfer {record.transfer_id}"
        reason = reset_reason(f"table {self.table_name(model)}", record, has_data=has_data, missing=missing)
        return DestinationState(last_transfer=record, version=record.transfer_id if record else None, reset_reason=reason)

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
    ) -> dict[str, object]:
        where = f"model {model.model_name}, recipient {recipient.id}"
        wanted = {f.name: pg_type(f) for f in batch.schema}
        columns = list(wanted)
        with self._connect() as conn:
            try:
                load_stage(conn, batch, wanted)
                conn.commit()
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_advisory_key(self.schema, model.model_name)])
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                create_log(conn, self.schema)
                self._check_lease(conn, model=model, recipient=recipient, expected=expected)
                self._claim(conn, model=model, recipient=recipient, record=record)
                written, deleted, evolution = self._write(
                    conn, model=model, recipient=recipient, batch_columns=columns, wanted=wanted, record=record, where=where
                )
                removed = self._remove(conn, model=model, removals=removals) if removals is not None else 0
                crash_point("mid_publish")
                insert_record(conn, self.schema, record)
                conn.commit()
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

    def _write(
        self, conn: psycopg.Connection, *, model: ModelConfig, recipient: RecipientConfig, batch_columns: list[str],
        wanted: dict[str, str], record: TransferRecord, where: str,
    ) -> tuple[int, int, Evolution]:
        """Adapt the table, then upsert the staged rows; a full refresh first deletes the rows it lacks.

        A full refresh's upsert also empties the columns the source dropped (a recipient's own columns
        keep their values). Returns (rows written, rows deleted, what adapting the table did).
        """
        name = model.model_name
        target = self._ident(name)
        refresh = record.transfer_type == FULL_REFRESH
        force = refresh or record.transfer_type == REPAIR  # the batch's rows win whatever their dates
        current = self._columns(conn, name)
        if current is None:
            self._create(conn, model=model, wanted=wanted)
            register(conn, schema=self.schema, model=name, wanted=wanted, fresh=True)
            evolution = Evolution(drift=SchemaDiff(), applied=SchemaDiff())
        else:
            evolution = evolve(conn, schema=self.schema, table=name, current=current, wanted=wanted, refresh=refresh,
                               where=where, model=name, recipient=recipient.id)
        deleted = evolution.deleted
        pk = sql.SQL(", ").join(map(sql.Identifier, model.primary_key))
        if refresh and current is not None:
            conn.execute(sql.SQL("ANALYZE {}").format(STAGE))
            matches = sql.SQL(" AND ").join(sql.SQL("s.{c} = t.{c}").format(c=sql.Identifier(c)) for c in model.primary_key)
            gone = sql.SQL("DELETE FROM {target} AS t WHERE NOT EXISTS (SELECT 1 FROM {stage} AS s WHERE {m})")
            deleted += conn.execute(gone.format(target=target, stage=STAGE, m=matches)).rowcount
        cols = sql.SQL(", ").join(map(sql.Identifier, batch_columns))
        lm = sql.Identifier(model.last_modified_column)
        updates = [c for c in batch_columns if c not in model.primary_key]
        insert = sql.SQL("INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {stage}").format(
            target=target, cols=cols, stage=STAGE)
        stale = list(evolution.stale) if refresh else []
        if updates or stale:
            sets = sql.SQL(", ").join([*(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates),
                                       *(sql.SQL("{} = NULL").format(sql.Identifier(c)) for c in stale)])
            insert = insert + sql.SQL(" ON CONFLICT ({pk}) DO UPDATE SET {sets} WHERE ").format(pk=pk, sets=sets)
            # A row is rewritten only when it changes (no dead tuples, no WAL for a replay). Values compare
            # as text, so every type (json too) has an equality. A full refresh's rows are the source's
            # current ones: any difference wins; otherwise newer, or as new with other values.
            values = [c for c in updates if c != model.last_modified_column] if not force else updates
            old = [sql.SQL("t.{}").format(sql.Identifier(c)) for c in [*values, *stale]]
            new = [*(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in values), *(sql.SQL("NULL") for _ in stale)]
            differ = sql.SQL("ROW({old})::text IS DISTINCT FROM ROW({new})::text").format(
                old=sql.SQL(", ").join(old), new=sql.SQL(", ").join(new))
            if force:
                insert = insert + differ
            elif values:
                insert = insert + sql.SQL("t.{lm} < EXCLUDED.{lm} OR (t.{lm} = EXCLUDED.{lm} AND {differ})").format(
                    lm=lm, differ=differ)
            else:
                insert = insert + sql.SQL("t.{lm} < EXCLUDED.{lm}").format(lm=lm)
        else:
            insert = insert + sql.SQL(" ON CONFLICT ({pk}) DO NOTHING").format(pk=pk)
        return conn.execute(insert).rowcount, deleted, evolution

    def _remove(self, conn: psycopg.Connection, *, model: ModelConfig, removals: Removals) -> int:
        """Delete the keys, or stamp them ``_incsync_deleted_at``, inside the publish transaction."""
        current = self._columns(conn, model.model_name)
        if current is None:
            return 0
        if removals.mode == "soft" and DELETED_AT in current:  # a key back at the source is no longer deleted
            back = sql.SQL(" AND ").join(sql.SQL("t.{c} = s.{c}").format(c=sql.Identifier(c)) for c in model.primary_key)
            conn.execute(sql.SQL("UPDATE {t} AS t SET {d} = NULL FROM {s} AS s WHERE {m} AND t.{d} IS NOT NULL").format(
                t=self._ident(model.model_name), d=sql.Identifier(DELETED_AT), s=STAGE, m=back))
        if removals.rows == 0:
            return 0
        keys = sql.Identifier("pg_temp", "_incsync_removals")
        types = self._columns(conn, model.model_name) or {}
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(keys))
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(keys, sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in model.primary_key)))
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
                keys, sql.SQL(", ").join(map(sql.Identifier, model.primary_key)))) as copy:
            for row in removals.keys.select(list(model.primary_key)).to_pylist():
                copy.write_row([row[c] for c in model.primary_key])
        target = self._ident(model.model_name)
        match = sql.SQL(" AND ").join(sql.SQL("t.{c} = k.{c}").format(c=sql.Identifier(c)) for c in model.primary_key)
        if removals.mode == "soft":
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} timestamptz").format(target, sql.Identifier(DELETED_AT)))
            query = sql.SQL("UPDATE {t} AS t SET {d} = %s FROM {k} AS k WHERE {m} AND t.{d} IS NULL").format(
                t=target, d=sql.Identifier(DELETED_AT), k=keys, m=match)
            return conn.execute(query, [removals.at]).rowcount
        return conn.execute(sql.SQL("DELETE FROM {t} AS t USING {k} AS k WHERE {m}").format(t=target, k=keys, m=match)).rowcount

    def _create(self, conn: psycopg.Connection, *, model: ModelConfig, wanted: dict[str, str]) -> None:
        body = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in wanted.items()]
        body.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, model.primary_key))))
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(self._ident(model.model_name), sql.SQL(", ").join(body)))

    def _check_lease(
        self, conn: psycopg.Connection, *, model: ModelConfig, recipient: RecipientConfig, expected: DestinationState
    ) -> None:
        """Under the (schema, model) advisory lock: refuse when another transfer committed since ``expected``."""
        current = last_record(conn, self.schema, model=model.model_name, recipient=recipient.id)
        was = expected.last_transfer.transfer_id if expected.last_transfer else None
        now = current.transfer_id if current else None
        check_lease(model=model.model_name, recipient=recipient.id, where=self.table_name(model), read=was, now=now)

    def _claim(self, conn: psycopg.Connection, *, model: ModelConfig, recipient: RecipientConfig, record: TransferRecord) -> None:
        """Refuse, before any row is written, a table that belongs to another recipient; stamp a new one."""
        pg_claim(
            conn, self.schema, owner_of(model, recipient), where=self._where(model),
            table_exists=lambda: self._columns(conn, model.model_name) is not None,
            recipients_logged=lambda: logged_recipients(conn, self.schema, model.model_name),
            transfer_id=record.transfer_id,
        )

    def _where(self, model: ModelConfig) -> str:
        return f"PostgreSQL table {self.table_name(model)} (destination {self.name})"

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        with self._connect() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_advisory_key(self.schema, model.model_name)])
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            previous = pg_owner(conn, self.schema, model.model_name)
            last = last_record(conn, self.schema, model=model.model_name, recipient=recipient.id)
            new = replace(owner_of(model, recipient), moved=last.transfer_id if last else "")
            pg_stamp(conn, self.schema, new, reason=reason)
            conn.commit()
        return previous

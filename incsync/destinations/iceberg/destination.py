"""Apache Iceberg destination through pyiceberg: ONE catalog commit adapts the table, upserts and records the transfer.

A publish reads the data files that may hold the batch's keys, decides the upsert in Arrow (``rows``), and
commits one snapshot that drops the rewritten files and adds the winners' (an OVERWRITE, or an APPEND when
no stored row changes), together with the schema changes, the owner stamp and the transfer record as table
properties (``catalog``); the record also rides in the snapshot's summary. The catalog's compare-and-swap
on the table's metadata refuses a commit made on a stale snapshot: the publish re-reads and checks its
lease again. A full refresh is one OVERWRITE snapshot replacing every data file: the table keeps its UUID,
its snapshots (time travel) and whatever a reader's engine built on it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from incsync.config.destinations import IcebergDestinationConfig
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.crashpoints import crash_point
from incsync.core.lease import check_lease
from incsync.core.schema_change import SchemaDiff, arrow_diff, change_metadata, incompatible_error
from incsync.destinations.base import (
    DELETED_AT,
    FULL_REFRESH,
    ICEBERG_FORMAT,
    INCREMENTAL,
    REPAIR,
    Capabilities,
    Destination,
    DestinationState,
    Location,
    Removals,
    TransferRecord,
    reset_reason,
)
from incsync.destinations.iceberg import catalog as cat
from incsync.destinations.iceberg import files
from incsync.destinations.iceberg.rows import upsert
from incsync.destinations.iceberg.types import conform_rows, iceberg_form, unpromotable, unpromotable_error
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import Owner, check_owner, now_iso, owner_of, refuse_unstamped
from incsync.errors import IncsyncError, LeaseError, PublishError
from incsync.staging.batch import StagedBatch
from incsync.storage.filesystems import resolve_options

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


PUBLISH_ATTEMPTS = 8


class IcebergDestination(Destination):
    """Table ``<namespace>.<model_name>`` of the catalog holds one recipient's copy of one model."""

    kind = "iceberg"
    capabilities = Capabilities(
        appends_new_keys=True,  # a first backfill's later commits skip reading the files their keys could be in
        recipient_views=False, maintained=True,
        lacks=(("recipient_views", "an Iceberg table has no views of its own; readers' engines and catalogs hold them"),
               ("infinities", "Iceberg timestamps and dates have no infinity")),
    )

    def __init__(self, config: IcebergDestinationConfig) -> None:
        self.config = config
        self.name = config.name
        self._catalog = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            try:
                self._catalog = cat.open_catalog(self.config)
            except IncsyncError:
                raise
            except Exception as exc:  # noqa: BLE001 - SQLAlchemy, HTTP and storage errors of several types
                raise PublishError(f"destination {self.name}: cannot open the Iceberg {self.config.catalog} catalog of "
                                   f"{self.config.path}: {type(exc).__name__}: {cat.scrub(str(exc), self.config)}") from None
        return self._catalog

    def check(self) -> None:
        """Open the catalog once (``incsync validate --connect``)."""
        _ = self.catalog

    def identifier(self, model: ModelConfig) -> str:
        return f"{self.config.namespace}.{model.model_name}"

    def _where(self, model: ModelConfig) -> str:
        return f"Iceberg table {self.identifier(model)} (destination {self.name})"

    def table(self, model: ModelConfig) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.identifier(model))
        except NoSuchTableError:
            return None

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        table = self.table(model)
        if table is None:
            return DestinationState()
        props = table.properties
        record = cat.record_of(props, recipient.id)
        snapshot = table.current_snapshot()
        has_data = snapshot is not None and int((snapshot.summary or {}).get("total-records", "0")) > 0
        stamp = cat.owner_of_table(props)
        where = f"Iceberg table {self.identifier(model)}"
        missing = stamp.moved_reason(record.transfer_id if record else None) if stamp else None
        missing = missing or files.missing(table)
        reason = reset_reason(where, record, has_data=has_data, missing=missing)
        return DestinationState(last_transfer=record, version=str(snapshot.snapshot_id) if snapshot else None,
                                reset_reason=reason)

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
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        where = f"model {model.model_name}, recipient {recipient.id}"
        form = iceberg_form(batch.schema)
        rows = conform_rows(batch.table(), form, where=where)
        for _ in range(PUBLISH_ATTEMPTS):
            table = self.table(model)
            try:
                if table is None:
                    return self._create(model=model, recipient=recipient, rows=rows, record=record, expected=expected)
                return self._commit(table, model=model, recipient=recipient, rows=rows, record=record, expected=expected,
                                    removals=removals, where=where, new_keys=new_keys)
            except (CommitFailedException, TableAlreadyExistsError):
                continue  # another writer committed first: re-read the table and check the lease again
            except IncsyncError:
                raise
            except Exception as exc:  # pyiceberg, pyarrow and storage raise many unrelated types
                raise PublishError(f"{where}: Iceberg publish to {self.identifier(model)} failed and nothing was "
                                   f"committed: {type(exc).__name__}: {exc}") from exc
        raise LeaseError(f"{where}: {self.identifier(model)} changed under {PUBLISH_ATTEMPTS} publish attempts in a row; "
                         "nothing was published. Lower the destination's concurrency or re-run the window.")

    def _properties(self, record: TransferRecord) -> dict[str, str]:
        return {cat.RECORD_PREFIX + record.recipient_id: record.to_json()}

    def _create(self, *, model: ModelConfig, recipient: RecipientConfig, rows: pa.Table, record: TransferRecord,
                expected: DestinationState) -> dict[str, object]:
        """The first transfer: the table, its owner stamp, its rows and the record in one catalog commit."""
        check_lease(model=model.model_name, recipient=recipient.id, where=self.identifier(model),
                    read=expected.last_transfer.transfer_id if expected.last_transfer else None, now=None)
        me = owner_of(model, recipient)
        props = {cat.OWNER_PROPERTY: me.to_json(), **self._ownership_log(me, None, f"first transfer {record.transfer_id}"),
                 **self._properties(record)}
        tx = self.catalog.create_table_transaction(self.identifier(model), schema=rows.schema, properties=props)
        files.commit_snapshot(tx, rows=rows, drop=[], summary={cat.SUMMARY_KEY: record.to_json()})
        crash_point("mid_publish")
        table = tx.commit_transaction()
        change = arrow_diff(rows.schema, rows.schema)
        return {**self._metadata(table, model, recipient, written=rows.num_rows), **change_metadata(change, change)}

    def _commit(self, table: Table, *, model: ModelConfig, recipient: RecipientConfig, rows: pa.Table, record: TransferRecord,
                expected: DestinationState, removals: Removals | None, where: str, new_keys: bool) -> dict[str, object]:
        name = model.model_name
        props = table.properties
        self._claim(table, model=model, recipient=recipient, transfer_id=record.transfer_id)
        seen = cat.record_of(props, recipient.id)
        check_lease(model=name, recipient=recipient.id, where=self.identifier(model),
                    read=expected.last_transfer.transfer_id if expected.last_transfer else None,
                    now=seen.transfer_id if seen else None)
        refresh = record.transfer_type == FULL_REFRESH
        current = files.arrow_schema(table.schema())
        change = arrow_diff(_without_stamp(current), rows.schema)
        bad = unpromotable(change, current, rows.schema)
        if change.incompatible and not refresh:
            raise incompatible_error(where, self.identifier(model), change.incompatible, model=name, recipient=recipient.id)
        if bad and not refresh:
            raise unpromotable_error(where, self.identifier(model), bad, model=name, recipient=recipient.id)
        tx = table.transaction()
        soft = removals is not None and removals.mode == "soft" and removals.rows > 0
        files.adapt(tx, change, rows.schema, replace_columns=[c.column for c in (*change.incompatible, *bad)] if refresh else [],
                    stamp=soft and DELETED_AT not in current.names)
        schema = files.arrow_schema(tx.table_metadata.schema())
        summary = {cat.SUMMARY_KEY: record.to_json()}
        if refresh:
            replaced = files.data_files(tx)
            full = conform_rows(rows, schema, where=where)
            files.commit_snapshot(tx, rows=full, drop=replaced, summary=summary)
            written, removed, deleted = rows.num_rows, 0, int(_total(table))
        else:
            keys = list(model.primary_key)
            removal_keys = (conform_rows(removals.keys.select(keys), pa.schema([schema.field(k) for k in keys]), where=where)
                            if removals is not None and removals.rows else None)
            if new_keys and removal_keys is None and record.transfer_type == INCREMENTAL and not change:
                tasks, stored = [], pa.Table.from_batches([], schema=schema)  # the caller knows no key is stored yet
            else:
                tasks, stored = files.read_candidates(tx, keys=keys, batch=rows, removal_keys=removal_keys)
            plan = upsert(stored, conform_rows(rows, schema, where=where), keys=keys, last_modified=model.last_modified_column,
                          brought=rows.schema.names, force=record.transfer_type == REPAIR, removals=removals,
                          removal_keys=removal_keys)
            drop, kept = files.rewrites(tasks, stored, plan.touched)
            files.commit_snapshot(tx, rows=pa.concat_tables([*kept, plan.rows]) if kept else plan.rows, drop=drop, summary=summary)
            written, removed, deleted = plan.written, plan.removed, 0
        tx.set_properties(self._properties(record))
        crash_point("mid_publish")
        published = tx.commit_transaction()
        metadata = self._metadata(published, model, recipient, written=written)
        if refresh:
            metadata["iceberg_rows_replaced"] = deleted
        if removals is not None:
            metadata["rows_removed"] = removed
        return {**metadata, **change_metadata(change, change, replaced=refresh)}

    def _metadata(self, table: Table, model: ModelConfig, recipient: RecipientConfig, *, written: int) -> dict[str, object]:
        snapshot = table.current_snapshot()
        return {"iceberg_table": self.identifier(model), "iceberg_snapshot_id": snapshot.snapshot_id if snapshot else 0,
                "iceberg_rows_written": written, OWNER_KEY: recipient.id}

    def _ownership_log(self, owner: Owner, previous: Owner | None, reason: str) -> dict[str, str]:
        log = {"owner": owner.to_json(), "previous": previous.to_json() if previous else None, "reason": reason, "at": now_iso()}
        return {cat.OWNERSHIP_LOG: json.dumps(log)}

    def _claim(self, table: Table, *, model: ModelConfig, recipient: RecipientConfig, transfer_id: str) -> None:
        """Check the owner stamp; an unstamped table whose records name only this recipient is adopted in the
        publish's own commit (the stamp is set on ``table``'s transaction by the caller's commit)."""
        me = owner_of(model, recipient)
        stamp = cat.owner_of_table(table.properties)
        if stamp is not None:
            check_owner(stamp, me, where=self._where(model))
            return
        logged = cat.logged_recipients(table.properties)
        others = [r for r in logged if r != recipient.id]
        if others or recipient.id not in logged:
            raise refuse_unstamped(me, where=self._where(model), others=others)
        reason = f"adopted by transfer {transfer_id}: its log names only {recipient.id}"
        table.transaction().set_properties({cat.OWNER_PROPERTY: me.to_json(), **self._ownership_log(me, None, reason)}).commit_transaction()

    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        root = self.config.path.rstrip("/")  # pyiceberg's default table location in the warehouse
        return Location(shown=f"{self.config.path} {self.identifier(model)}", table_format=ICEBERG_FORMAT,
                        path=f"{root}/{self.config.namespace}/{model.model_name}", storage_options=cat.remote_options(self.config))

    def metadata_location(self, *, model: ModelConfig, recipient: RecipientConfig) -> str | None:
        table = self.table(model)
        return None if table is None else table.metadata_location

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        table = self.table(model)  # the current snapshot as pyiceberg reads it
        return table.scan().to_arrow() if table is not None else pa.table({})

    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        table = self.table(model)
        return None if table is None else arrow_diff(_without_stamp(files.arrow_schema(table.schema())), iceberg_form(staged))

    def owner(self, model: ModelConfig) -> Owner | None:
        table = self.table(model)
        return None if table is None else cat.owner_of_table(table.properties)

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        table = self.table(model)
        if table is None:
            raise PublishError(f"model {model.model_name}: {self._where(model)} does not exist; there is nothing to move")
        previous = cat.owner_of_table(table.properties)
        last = cat.record_of(table.properties, recipient.id)
        new = replace(owner_of(model, recipient), moved=last.transfer_id if last else "")
        properties = {cat.OWNER_PROPERTY: new.to_json(), **self._ownership_log(new, previous, reason)}
        table.transaction().set_properties(properties).commit_transaction()
        return previous

    def maintain(self, models: list[ModelConfig], *, compact: bool, dry_run: bool) -> list:
        from incsync.destinations.iceberg.maintain import maintain_table
        from incsync.storage.files import open_store

        done = []
        options = resolve_options(self.config.storage_options, f"destinations[{self.name}].storage_options")
        for model in models:
            table = self.table(model)
            if table is not None:
                done.append(maintain_table(table, destination=self.name, name=self.identifier(model),
                                           retention_hours=self.config.retention_hours, compact=compact, dry_run=dry_run,
                                           store=open_store(table.location(), options)))
        return done


def _without_stamp(schema: pa.Schema) -> pa.Schema:
    return schema.remove(schema.get_field_index(DELETED_AT)) if DELETED_AT in schema.names else schema


def _total(table: Table) -> int:
    snapshot = table.current_snapshot()
    return int((snapshot.summary or {}).get("total-records", "0")) if snapshot else 0

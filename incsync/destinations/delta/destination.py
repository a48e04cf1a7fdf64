"""Delta Lake destination through delta-rs: one MERGE commit (``delta_merge``) carrying the transfer record.

A batch whose types widen the table's (int → bigint, ...) is published as one overwrite commit that
rewrites the table with the wider types (``delta_rewrite``); a type change that is no widening fails
before anything is committed, naming the column, both types and the fix, until a full refresh.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from incsync.config.destinations import DeltaDestinationConfig
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.lease import check_lease
from incsync.core.schema_change import SchemaDiff, arrow_diff, change_metadata, incompatible_error
from incsync.destinations.base import (
    DELTA_FORMAT,
    FULL_REFRESH,
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
from incsync.destinations.delta.cluster import ordered
from incsync.destinations.delta.maintain import file_sizes, maintain_table, rewritten
from incsync.destinations.delta.merge import merge, merge_fixes
from incsync.destinations.delta.owner import claim, stamp, stamped_owner
from incsync.destinations.delta.rewrite import rewrite
from incsync.destinations.delta.state import RECORD_KEY, find_record, transactions
from incsync.destinations.delta.state import app_id as delta_app_id
from incsync.destinations.maintenance import Maintained
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import OWNER_PROPERTY, OWNERSHIP_LOG_KEY, Owner, now_iso, owner_of
from incsync.destinations.types import delta_form
from incsync.errors import LeaseError, PublishError
from incsync.staging.batch import StagedBatch
from incsync.storage.files import open_store
from incsync.storage.filesystems import resolve_options
from incsync.storage.names import is_url, local_path
from incsync.storage.reach import check_storage

# Commits of other recipients to the same table make a publish re-check its lease and try again.
PUBLISH_ATTEMPTS = 8


def app_id(model: ModelConfig, recipient: RecipientConfig) -> str:
    return delta_app_id(model.model_name, recipient.id)


class DeltaDestination(Destination):
    """Table ``<path>/<model_name>`` holds one recipient's copy of one model."""

    kind = "delta"
    capabilities = Capabilities(
        appends_new_keys=True,  # an append streams, where a MERGE joins the batch with every file its keys span
        recipient_views=False, maintained=True,
        lacks=(("recipient_views", "a Delta table has no views of its own; readers' engines hold them"),
               ("infinities", "Delta timestamps and dates have no infinity")),
    )

    def __init__(self, config: DeltaDestinationConfig) -> None:
        self.config = config
        self.name = config.name
        # delta-rs takes the same option names (docs/storage.md); secrets are read from the environment here.
        self.storage_options = resolve_options(config.storage_options, f"destinations[{config.name}].storage_options") or None

    def table_path(self, model: ModelConfig) -> str:
        if is_url(self.config.path):
            return f"{self.config.path.rstrip('/')}/{model.model_name}"
        return str(Path(local_path(self.config.path)) / model.model_name)

    def _table(self, model: ModelConfig) -> DeltaTable | None:
        return self._table_at(self.table_path(model))

    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        path = self.table_path(model)
        return Location(shown=path, path=path, table_format=DELTA_FORMAT, storage_options=self.storage_options)

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        dt = self._table(model)  # the recipient owns the whole table
        return dt.to_pyarrow_table() if dt is not None else pa.table({})

    def stored_schema(self, *, model: ModelConfig, recipient: RecipientConfig) -> dict[str, str] | None:
        dt = self._table(model)
        return None if dt is None else {f.name: str(f.type) for f in pa.schema(dt.schema().to_arrow())}

    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        dt = self._table(model)
        return None if dt is None else arrow_diff(pa.schema(dt.schema().to_arrow()), staged)

    def check(self) -> None:
        if is_url(self.config.path):
            check_storage(f"destinations[{self.name}]", self.config.path, self.config.storage_options)

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer, checked against the table's data (docs/design.md#destination-reset)."""
        dt = self._table(model)
        path = self.table_path(model)
        if dt is None:
            if not is_url(path) and any(Path(path).rglob("*.parquet")):
                return DestinationState(reset_reason=f"destination_reset: {path} holds data files but no Delta log")
            return DestinationState()
        state = self._state(dt, model=model, recipient=recipient)
        actions = pa.table(dt.get_add_actions(flatten=False)).select(["path", "num_records"]).to_pydict()
        rows = actions["num_records"]
        has_data = any(n is None or n > 0 for n in rows)
        missing = None
        if is_url(path):  # one listing of the table instead of a request per file
            store = open_store(path, self.storage_options)
            present = {store.relative(f.path) for f in store.list(recursive=True)}
            gone = [p for p in actions["path"] if unquote(p) not in present]
        else:
            gone = [p for p in actions["path"] if not (Path(path) / unquote(p)).exists()]
        if gone:
            missing = f"{len(gone)} data file(s) of Delta table {path} are missing (e.g. {gone[0]})"
        raw = dt.metadata().configuration.get(OWNER_PROPERTY)
        last_id = state.last_transfer.transfer_id if state.last_transfer else None
        missing = (Owner.from_json(raw).moved_reason(last_id) if raw else None) or missing
        reason = reset_reason(f"Delta table {path}", state.last_transfer, has_data=has_data, missing=missing)
        return replace(state, reset_reason=reason) if reason else state

    def _state(self, dt: DeltaTable | None, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer of (model, recipient) as of the version ``dt`` was loaded at."""
        if dt is None:
            return DestinationState()
        record = find_record(dt, model=model.model_name, recipient=recipient.id)
        return DestinationState(last_transfer=record, version=str(dt.version()))

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
        path = self.table_path(model)
        where = f"model {model.model_name}, recipient {recipient.id}"
        refresh = record.transfer_type == FULL_REFRESH
        me = owner_of(model, recipient)
        for _ in range(PUBLISH_ATTEMPTS):
            dt = self._table(model)
            if dt is None:
                self._create(path, delta_form(batch.schema), me, transfer_id=record.transfer_id)
                continue
            if claim(dt, me, model=model, recipient=recipient, transfer_id=record.transfer_id, where=self._where(model)):
                continue  # the adoption stamp committed a version of its own: publish against the new one
            self._check_lease(dt, model=model, recipient=recipient, expected=expected)
            change = arrow_diff(pa.schema(dt.schema().to_arrow()), delta_form(batch.schema))
            if change.incompatible and not refresh:
                raise incompatible_error(where, path, change.incompatible, model=model.model_name, recipient=recipient.id)
            # max_commit_retries=0 turns each commit into a compare-and-swap on the table version the
            # lease was checked at: delta-rs refuses the commit when any other writer committed since,
            # so the record's commit is exactly the next version, which its transactions point at.
            props = CommitProperties(
                custom_metadata={RECORD_KEY: record.to_json()},
                app_transactions=transactions(record, commit_version=dt.version() + 1), max_commit_retries=0,
            )
            files_before, read = file_sizes(dt), {}
            try:
                if dt.version() == 0 and not refresh and not dt.file_uris():
                    write_deltalake(dt, ordered(batch, model), mode="append", commit_properties=props)  # the stamped, empty table
                elif refresh:
                    same = _same_columns(dt.schema().to_arrow(), delta_form(batch.schema))
                    write_deltalake(
                        dt, ordered(batch, model), mode="overwrite", target_file_size=self.config.target_file_size,
                        schema_mode=None if same else "overwrite", commit_properties=props,
                    )
                elif change.widened:
                    rewrite(dt, model=model, batch=batch, change=change, props=props,
                            target_file_size=self.config.target_file_size)
                elif new_keys and removals is None and record.transfer_type == INCREMENTAL and not change:
                    write_deltalake(dt, ordered(batch, model), mode="append", target_file_size=self.config.target_file_size,
                                    commit_properties=props)
                elif removals is not None or record.transfer_type == REPAIR:
                    merge_fixes(dt, model=model, batch=batch, props=props, removals=removals,
                                force=record.transfer_type == REPAIR)
                else:
                    read = merge(dt, model=model, batch=batch, props=props)
            except CommitFailedError:
                continue  # another writer committed after the lease check: check again at the new version
            except Exception as exc:  # delta-rs raises several unrelated types; name the table and keep the cause
                raise PublishError(
                    f"{where}: Delta publish to {path} failed and nothing was committed: {exc}"
                ) from exc
            # A full refresh overwrites the schema: columns the source dropped are gone, not kept.
            applied = replace(change, dropped=()) if refresh else change
            published = self._table_at(path)
            return {"delta_table_version": published.version(), "delta_table_path": path, OWNER_KEY: recipient.id,
                    **rewritten(files_before, file_sizes(published)), **read, **change_metadata(change, applied, replaced=refresh)}
        raise LeaseError(
            f"{where}: {path} changed under {PUBLISH_ATTEMPTS} publish "
            "attempts in a row; nothing was published. Lower the destination's concurrency or re-run the window."
        )

    def maintain(self, models: list[ModelConfig], *, compact: bool, dry_run: bool) -> list[Maintained]:
        """Compaction, vacuum past ``retention_hours`` and a checkpoint of each model's table (``delta.maintain``)."""
        done = []
        for model in models:
            path = self.table_path(model)
            dt = self._table_at(path)
            if dt is None:
                continue
            done.append(maintain_table(dt, destination=self.name, path=path, storage_options=self.storage_options,
                                       target_file_size=self.config.target_file_size,
                                       retention_hours=self.config.retention_hours, compact=compact, dry_run=dry_run))
        return done

    def _layout(self) -> dict[str, str | None]:
        """Table properties of a new table: files small enough that a MERGE rewrites only a few of them, and the
        change data feed when the destination keeps it."""
        layout: dict[str, str | None] = {"delta.targetFileSize": str(self.config.target_file_size)}
        if self.config.change_data_feed:
            layout["delta.enableChangeDataFeed"] = "true"
        return layout

    def _where(self, model: ModelConfig) -> str:
        return f"Delta table {self.table_path(model)} (destination {self.name})"

    def _create(self, path: str, schema: pa.Schema, owner: Owner, *, transfer_id: str) -> None:
        """Create the empty table stamped with its owner; the first transfer commits into it next.

        delta-rs accepts custom table properties only when creating a table or altering one, never in a
        data commit, so the stamp's commit (version 0) precedes the first transfer's.
        """
        log = {"owner": owner.to_json(), "previous": None, "reason": f"first transfer {transfer_id}", "at": now_iso()}
        try:
            DeltaTable.create(
                path, schema=schema, mode="error", storage_options=self.storage_options,
                configuration={**self._layout(), OWNER_PROPERTY: owner.to_json()},
                raise_if_key_not_exists=False,
                commit_properties=CommitProperties(custom_metadata={OWNERSHIP_LOG_KEY: json.dumps(log)}),
            )
        except Exception:
            if self._table_at(path) is None:
                raise

    def _table_at(self, path: str) -> DeltaTable | None:
        try:
            return DeltaTable(path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def owner(self, model: ModelConfig) -> Owner | None:
        return stamped_owner(self._table(model))

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        dt = self._table(model)
        if dt is None:
            raise PublishError(f"model {model.model_name}: {self._where(model)} does not exist; there is nothing to move")
        previous = self.owner(model)
        last = self._state(dt, model=model, recipient=recipient).last_transfer
        new = replace(owner_of(model, recipient), moved=last.transfer_id if last else "")
        stamp(dt, new, previous=previous, reason=reason)
        return previous

    def _check_lease(
        self, dt: DeltaTable | None, *, model: ModelConfig, recipient: RecipientConfig, expected: DestinationState
    ) -> None:
        """Refuse to publish when another transfer of (model, recipient) committed since this one read its state.

        ``dt`` is the version the commit will be made against, so check and commit see the same table.
        """
        current = self._state(dt, model=model, recipient=recipient)
        was = expected.last_transfer.transfer_id if expected.last_transfer else None
        now = current.last_transfer.transfer_id if current.last_transfer else None
        check_lease(model=model.model_name, recipient=recipient.id, where=self.table_path(model), read=was, now=now)


def _same_columns(current: pa.Schema, incoming: pa.Schema) -> bool:
    return [(f.name, str(f.type)) for f in current] == [(f.name, str(f.type)) for f in incoming]

"""Delta Lake destination through delta-rs: one MERGE commit carrying the transfer record.

A batch whose types widen the table's (int → bigint, ...) is published as one overwrite commit that
rewrites the table with the wider types (``delta_rewrite``); a type change that is no widening fails
before anything is committed, naming the column, both types and the fix, until a full refresh.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from incsync.config import DeltaDestinationConfig, ModelConfig, RecipientConfig
from incsync.crashpoints import crash_point
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
from incsync.destinations.delta_rewrite import merged_rows, widened_schema
from incsync.destinations.delta_state import RECORD_KEY, find_record, transactions
from incsync.destinations.delta_state import app_id as delta_app_id
from incsync.destinations.ownership import METADATA_KEY as OWNER_KEY
from incsync.destinations.ownership import (
    OWNER_PROPERTY,
    OWNERSHIP_LOG_KEY,
    Owner,
    check_owner,
    now_iso,
    owner_of,
    refuse_unstamped,
)
from incsync.errors import LeaseError, PublishError, SchemaError
from incsync.lease import check_lease
from incsync.schema_change import SchemaDiff, arrow_diff, change_metadata, incompatible_error
from incsync.staged_batch import StagedBatch
from incsync.filesystems import resolve_options
from incsync.storage import open_store
from incsync.storage_names import is_url, local_path
from incsync.destination_types import changed_kinds, delta_form, to_delta

# Commits of other recipients to the same table make a publish re-check its lease and try again.
PUBLISH_ATTEMPTS = 8


def app_id(model: ModelConfig, recipient: RecipientConfig) -> str:
    return delta_app_id(model.model_name, recipient.id)


def _quote(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


class DeltaDestination(Destination):
    """Table ``<path>/<model_name>`` holds one recipient's copy of one model."""

    kind = "delta"

    def __init__(self, config: DeltaDestinationConfig):
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

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer, checked against the table's data (DESIGN: a reset destination is re-synced)."""
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
            if self._claim(dt, me, model=model, recipient=recipient, transfer_id=record.transfer_id):
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
            try:
                if dt.version() == 0 and not refresh and not dt.file_uris():
                    write_deltalake(dt, _reader(batch), mode="append", commit_properties=props)  # the stamped, empty table
                elif refresh:
                    same = _same_columns(dt.schema().to_arrow(), delta_form(batch.schema))
                    write_deltalake(
                        dt, _reader(batch), mode="overwrite", target_file_size=self.config.target_file_size,
                        schema_mode=None if same else "overwrite", commit_properties=props,
                    )
                elif change.widened:
                    self._rewrite(dt, model=model, batch=batch, change=change, props=props)
                elif removals is not None or record.transfer_type == REPAIR:
                    self._merge_fixes(dt, model=model, batch=batch, props=props, removals=removals,
                                      force=record.transfer_type == REPAIR)
                else:
                    self._merge(dt, model=model, batch=batch, props=props)
            except CommitFailedError:
                continue  # another writer committed after the lease check: check again at the new version
            except Exception as exc:  # delta-rs raises several unrelated types; name the table and keep the cause
                raise PublishError(
                    f"{where}: Delta publish to {path} failed and nothing was committed: {exc}"
                ) from exc
            # A full refresh overwrites the schema: columns the source dropped are gone, not kept.
            applied = replace(change, dropped=()) if refresh else change
            return {"delta_table_version": self._table_at(path).version(), "delta_table_path": path, OWNER_KEY: recipient.id,
                    **change_metadata(change, applied, replaced=refresh)}
        raise LeaseError(
            f"{where}: {path} changed under {PUBLISH_ATTEMPTS} publish "
            "attempts in a row; nothing was published. Lower the destination's concurrency or re-run the window."
        )

    def _rewrite(
        self, dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, change: SchemaDiff, props: CommitProperties
    ) -> None:
        """One overwrite commit: the table rewritten with the wider types and the batch merged in."""
        schema = widened_schema(pa.schema(dt.schema().to_arrow()), delta_form(batch.schema), change)
        rows = merged_rows(dt, _delta_table(batch), schema=schema, primary_key=list(model.primary_key),
                           last_modified=model.last_modified_column)
        write_deltalake(dt, _crash_after(rows), mode="overwrite", schema_mode="overwrite",
                        target_file_size=self.config.target_file_size, commit_properties=props)

    def _layout(self) -> dict[str, str | None]:
        """Table properties of a new table: files small enough that a MERGE rewrites only a few of them."""
        return {"delta.targetFileSize": str(self.config.target_file_size)}

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
                path, schema=schema, mode="error", storage_options=self.storage_options, configuration={**self._layout(), OWNER_PROPERTY: owner.to_json()},
                raise_if_key_not_exists=False,
                commit_properties=CommitProperties(custom_metadata={OWNERSHIP_LOG_KEY: json.dumps(log)}),
            )
        except Exception:  # noqa: BLE001 - another writer created it first: the caller reloads and checks its stamp
            if self._table_at(path) is None:
                raise

    def _table_at(self, path: str) -> DeltaTable | None:
        try:
            return DeltaTable(path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def _claim(
        self, dt: DeltaTable, me: Owner, *, model: ModelConfig, recipient: RecipientConfig, transfer_id: str
    ) -> bool:
        """Refuse a table of another recipient; stamp an unstamped one whose log names only ``me``.

        Returns True when it committed the adoption stamp (the caller must reload the table).
        """
        raw = dt.metadata().configuration.get(OWNER_PROPERTY)
        if raw is not None:
            check_owner(Owner.from_json(raw), me, where=self._where(model))
            return False
        named = {r.recipient_id for r in _records(dt.history())}
        if dt.transaction_version(app_id(model, recipient)) is not None:
            named.add(recipient.id)
        others = sorted(named - {recipient.id})
        if others or recipient.id not in named:
            raise refuse_unstamped(me, where=self._where(model), others=others)
        try:
            self._stamp(dt, me, previous=None, reason=f"adopted by transfer {transfer_id}: its log names only {recipient.id}")
        except CommitFailedError:
            pass  # another writer committed first: the caller reloads and checks again
        return True

    def _stamp(self, dt: DeltaTable, owner: Owner, *, previous: Owner | None, reason: str) -> None:
        log = {"owner": owner.to_json(), "previous": previous.to_json() if previous else None, "reason": reason, "at": now_iso()}
        dt.alter.set_table_properties(
            {OWNER_PROPERTY: owner.to_json()}, raise_if_not_exists=False,
            commit_properties=CommitProperties(custom_metadata={OWNERSHIP_LOG_KEY: json.dumps(log)}, max_commit_retries=0),
        )

    def owner(self, model: ModelConfig) -> Owner | None:
        dt = self._table(model)
        raw = dt.metadata().configuration.get(OWNER_PROPERTY) if dt is not None else None
        return None if raw is None else Owner.from_json(raw)

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        dt = self._table(model)
        if dt is None:
            raise PublishError(f"model {model.model_name}: {self._where(model)} does not exist; there is nothing to move")
        previous = self.owner(model)
        last = self._state(dt, model=model, recipient=recipient).last_transfer
        new = replace(owner_of(model, recipient), moved=last.transfer_id if last else "")
        self._stamp(dt, new, previous=previous, reason=reason)
        return previous

    def _merge(self, dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, props: CommitProperties) -> None:
        changed = changed_kinds(pa.schema(dt.schema().to_arrow()), delta_form(batch.schema))
        if changed:
            raise SchemaError(
                f"model {model.model_name}: {'; '.join(changed)} (docs/types.md says how each source type arrives); "
                "run a full refresh (--full-refresh) to rewrite the table with the new types"
            )
        before = dt.version()
        on = " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" + _key_range(batch, c) for c in model.primary_key)
        (
            dt.merge(_reader(batch), predicate=on, source_alias="s", target_alias="t", merge_schema=True, commit_properties=props)
            .when_matched_update_all(predicate=_newer_or_different(batch, model, existing=dt.schema().to_arrow().names))
            .when_not_matched_insert_all()
            .execute()
        )
        if dt.version() == before:
            # Nothing changed: still record the transfer, in a commit of its own with no data.
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=props)

    def _merge_fixes(
        self, dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, props: CommitProperties,
        removals: Removals | None, force: bool,
    ) -> None:
        """One MERGE commit: the batch's rows upserted (``force``: whatever their dates) and the removals'
        keys deleted, or stamped ``_incsync_deleted_at`` (the column is added by this same commit).

        Hard: an ``_incsync_op`` column tells upserts from removals and never reaches the table. Soft: the
        stamp itself does (set on removal rows only), so the source carries no other extra column."""
        rows = _delta_table(batch)
        names = list(rows.schema.names)
        soft = removals is not None and removals.mode == "soft"
        marker = DELETED_AT if soft else "_incsync_op"
        marker_type = pa.timestamp("us", tz="UTC") if soft else pa.string()
        source = rows.append_column(pa.field(marker, marker_type), pa.nulls(rows.num_rows, marker_type))
        if removals is not None and removals.rows:
            keys = removals.keys.select(list(model.primary_key))
            gone = {n: pa.nulls(keys.num_rows, rows.schema.field(n).type) for n in names}
            for c in model.primary_key:
                gone[c] = keys[c].cast(rows.schema.field(c).type)
            value = removals.at if soft else "remove"
            gone[marker] = pa.array([value] * keys.num_rows, marker_type)
            source = pa.concat_tables([source, pa.table(gone, schema=source.schema)])
        columns = {_quote(n): f"s.{_quote(n)}" for n in names}
        if soft and DELETED_AT in dt.schema().to_arrow().names:
            columns[_quote(DELETED_AT)] = "NULL"  # a key back at the source is no longer deleted
        removal, upsert_only = f"s.{_quote(marker)} IS NOT NULL", f"s.{_quote(marker)} IS NULL"
        on = " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" for c in model.primary_key)
        merge = dt.merge(source, predicate=on, source_alias="s", target_alias="t", commit_properties=props,
                         merge_schema=soft)  # soft: the stamp column joins the table in this commit
        if soft:
            merge = merge.when_matched_update({_quote(DELETED_AT): f"s.{_quote(DELETED_AT)}"},
                                              predicate=f"{removal} AND t.{_quote(DELETED_AT)} IS NULL"
                                              if DELETED_AT in dt.schema().to_arrow().names else removal)
        else:
            merge = merge.when_matched_delete(predicate=removal)
        upsert = upsert_only + ("" if force else f" AND ({_newer_or_different(batch, model, existing=names)})")
        before = dt.version()
        merge.when_matched_update(columns, predicate=upsert).when_not_matched_insert(columns, predicate=upsert_only).execute()
        if dt.version() == before:
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=props)

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


def _records(history: list[dict]) -> Iterator[TransferRecord]:
    for commit in history:
        raw = commit.get(RECORD_KEY)
        if raw is not None:
            yield TransferRecord.from_json(raw if isinstance(raw, str) else json.dumps(raw))


def _reader(batch: StagedBatch) -> pa.RecordBatchReader:
    """The staged rows, with the ``mid_publish`` crash point once delta-rs has consumed them all."""
    reader = batch.reader()
    schema = delta_form(reader.schema)  # Delta's own types for time of day and wide decimals (docs/types.md)
    return _crash_after(pa.RecordBatchReader.from_batches(schema, (to_delta(b, schema) for b in reader)))


def _delta_table(batch: StagedBatch) -> pa.Table:
    """The staged rows in Delta's types, in memory (a widening rewrite merges them with the table)."""
    table = batch.table()
    schema = delta_form(table.schema)
    return pa.Table.from_batches([to_delta(b, schema) for b in table.to_batches()], schema)


def _crash_after(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        yield from reader
        crash_point("mid_publish")

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _key_range(batch: StagedBatch, column: str) -> str:
    """`` AND t.k >= min AND t.k <= max`` of the batch's integer key: delta-rs prunes the files no
    changed key can be in before it joins (it still copies every row of each file it rewrites)."""
    if batch.rows == 0 or not pa.types.is_integer(batch.schema.field(column).type):
        return ""
    import pyarrow.compute as pc

    bounds = pc.min_max(batch.table(columns=[column])[column])
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None:
        return ""
    return f" AND t.{_quote(column)} >= {int(low)} AND t.{_quote(column)} <= {int(high)}"


def _newer_or_different(batch: StagedBatch, model: ModelConfig, *, existing: list[str]) -> str:
    """A row is replaced by a newer one, or by one as new whose values differ: replaying a batch (or
    a no-change lookback re-read) updates no row, so the MERGE rewrites no file and makes no commit.
    A column the table does not have yet (added at the source) differs where the batch holds a value."""
    lm = _quote(model.last_modified_column)
    others = [c for c in batch.schema.names if c not in model.primary_key and c != model.last_modified_column]
    if not others:
        return f"s.{lm} > t.{lm}"
    differ = " OR ".join(f"(s.{_quote(c)} IS DISTINCT FROM t.{_quote(c)})" if c in existing else f"(s.{_quote(c)} IS NOT NULL)"
                         for c in others)
    return f"s.{lm} > t.{lm} OR (s.{lm} = t.{lm} AND ({differ}))"


def _same_columns(current: pa.Schema, incoming: pa.Schema) -> bool:
    return [(f.name, str(f.type)) for f in current] == [(f.name, str(f.type)) for f in incoming]

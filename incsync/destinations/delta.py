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

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from incsync.config import DeltaDestinationConfig, ModelConfig, RecipientConfig
from incsync.crashpoints import crash_point
from incsync.destinations.base import FULL_REFRESH, Destination, DestinationState, TransferRecord
from incsync.destinations.delta_rewrite import merged_rows, widened_schema
from incsync.errors import LeaseError, PublishError
from incsync.schema_change import SchemaDiff, arrow_diff, change_metadata, incompatible_error
from incsync.staging import StagedBatch

RECORD_KEY = "incsync.transfer"
HISTORY_SCAN = 100
# Commits of other recipients to the same table make a publish re-check its lease and try again.
PUBLISH_ATTEMPTS = 8


def app_id(model: ModelConfig, recipient: RecipientConfig) -> str:
    return f"incsync:{model.model_name}:{recipient.id}"


def _quote(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


class DeltaDestination(Destination):
    """Table ``<path>/<model_name>`` holds one recipient's copy of one model."""

    kind = "delta"

    def __init__(self, config: DeltaDestinationConfig):
        self.config = config
        self.name = config.name

    def table_path(self, model: ModelConfig) -> str:
        return str(Path(self.config.path) / model.model_name) if "://" not in self.config.path else f"{self.config.path.rstrip('/')}/{model.model_name}"

    def _table(self, model: ModelConfig) -> DeltaTable | None:
        try:
            return DeltaTable(self.table_path(model))
        except TableNotFoundError:
            return None

    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        return self._state(self._table(model), model=model, recipient=recipient)

    def _state(self, dt: DeltaTable | None, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last transfer of (model, recipient) as of the version ``dt`` was loaded at."""
        if dt is None:
            return DestinationState()
        version = str(dt.version())
        for commit in dt.history(limit=HISTORY_SCAN):
            raw = commit.get(RECORD_KEY)
            if raw is None:
                continue
            record = TransferRecord.from_json(raw if isinstance(raw, str) else json.dumps(raw))
            if record.recipient_id == recipient.id and record.model_name == model.model_name:
                return DestinationState(last_transfer=record, version=version)
        return DestinationState(version=version)

    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
    ) -> dict[str, object]:
        txns = [Transaction(app_id(model, recipient), record.high_watermark_micros)] if record.high_watermark_micros is not None else []
        # max_commit_retries=0 turns each commit into a compare-and-swap on the table version the
        # lease was checked at: delta-rs refuses the commit when any other writer committed since.
        props = CommitProperties(
            custom_metadata={RECORD_KEY: record.to_json()}, app_transactions=txns, max_commit_retries=0
        )
        path = self.table_path(model)
        where = f"model {model.model_name}, recipient {recipient.id}"
        refresh = record.transfer_type == FULL_REFRESH
        for _ in range(PUBLISH_ATTEMPTS):
            dt = self._table(model)
            self._check_lease(dt, model=model, recipient=recipient, expected=expected)
            change = SchemaDiff() if dt is None else arrow_diff(pa.schema(dt.schema().to_arrow()), batch.schema)
            if change.incompatible and not refresh:
                raise incompatible_error(where, path, change.incompatible, model=model.model_name, recipient=recipient.id)
            try:
                if dt is None:
                    write_deltalake(path, _reader(batch), mode="append", commit_properties=props, configuration=self._layout())
                elif refresh:
                    same = _same_columns(dt.schema().to_arrow(), batch.schema)
                    write_deltalake(
                        dt, _reader(batch), mode="overwrite", target_file_size=self.config.target_file_size,
                        schema_mode=None if same else "overwrite", commit_properties=props,
                    )
                elif change.widened:
                    self._rewrite(dt, model=model, batch=batch, change=change, props=props)
                else:
                    self._merge(dt, model=model, batch=batch, props=props)
            except CommitFailedError:
                continue  # another writer committed after the lease check: check again at the new version
            except Exception as exc:  # delta-rs raises several unrelated types; name the table and keep the cause
                if dt is None and self._table(model) is not None:
                    continue  # another writer created the table first
                raise PublishError(
                    f"{where}: Delta publish to {path} failed and nothing was committed: {exc}"
                ) from exc
            # A full refresh overwrites the schema: columns the source dropped are gone, not kept.
            applied = replace(change, dropped=()) if refresh else change
            return {"delta_table_version": DeltaTable(path).version(), "delta_table_path": path,
                    **change_metadata(change, applied, replaced=refresh)}
        raise LeaseError(
            f"{where}: {path} changed under {PUBLISH_ATTEMPTS} publish "
            "attempts in a row; nothing was published. Lower the destination's concurrency or re-run the window."
        )

    def _rewrite(
        self, dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, change: SchemaDiff, props: CommitProperties
    ) -> None:
        """One overwrite commit: the table rewritten with the wider types and the batch merged in."""
        schema = widened_schema(pa.schema(dt.schema().to_arrow()), batch.schema, change)
        rows = merged_rows(dt, batch.table(), schema=schema, primary_key=list(model.primary_key),
                           last_modified=model.last_modified_column)
        write_deltalake(dt, _crash_after(rows), mode="overwrite", schema_mode="overwrite",
                        target_file_size=self.config.target_file_size, commit_properties=props)

    def _layout(self) -> dict[str, str | None]:
        """Table properties of a new table: files small enough that a MERGE rewrites only a few of them."""
        return {"delta.targetFileSize": str(self.config.target_file_size)}

    def _merge(self, dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, props: CommitProperties) -> None:
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

    def _check_lease(
        self, dt: DeltaTable | None, *, model: ModelConfig, recipient: RecipientConfig, expected: DestinationState
    ) -> None:
        """Refuse to publish when another transfer of (model, recipient) committed since this one read its state.

        ``dt`` is the version the commit will be made against, so check and commit see the same table.
        """
        current = self._state(dt, model=model, recipient=recipient)
        was = expected.last_transfer.transfer_id if expected.last_transfer else None
        now = current.last_transfer.transfer_id if current.last_transfer else None
        if was != now:
            raise LeaseError(
                f"model {model.model_name}, recipient {recipient.id}: transfer {now} committed to "
                f"{self.table_path(model)} after this transfer read {was}; nothing was published. Re-run the window."
            )

    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        dt = self._table(model)
        return dt.to_pyarrow_table() if dt is not None else pa.table({})


def _reader(batch: StagedBatch) -> pa.RecordBatchReader:
    """The staged rows, with the ``mid_publish`` crash point once delta-rs has consumed them all."""
    return _crash_after(batch.reader())


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

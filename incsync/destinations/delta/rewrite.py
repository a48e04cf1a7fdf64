"""Widening a Delta table's column types through delta-rs, which has no type widening (delta-rs#2464).

The table is rewritten in ONE overwrite commit whose rows are the MERGE's result: the existing rows
cast to the wider schema, minus those the batch replaces (same key, batch last-modified newer or
equal), plus the batch's winning rows. The transfer record and HW ride in that same commit, so a
reader sees the old version or the new one. The existing rows stream through; only the batch's keys
are held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake

from incsync.config.model import ModelConfig
from incsync.core.schema_change import SchemaDiff, conform
from incsync.destinations.delta.batch import batch_table, crash_after
from incsync.destinations.types import delta_form
from incsync.staging.batch import StagedBatch

_ROW = "__incsync_row"
_BATCH_LM = "__incsync_batch_lm"


def rewrite(
    dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, change: SchemaDiff, props: CommitProperties,
    target_file_size: int,
) -> None:
    """One overwrite commit: the table rewritten with the wider types and the batch merged in."""
    schema = widened_schema(pa.schema(dt.schema().to_arrow()), delta_form(batch.schema), change)
    rows = merged_rows(dt, batch_table(batch), schema=schema, primary_key=list(model.primary_key),
                       last_modified=model.last_modified_column)
    write_deltalake(dt, crash_after(rows), mode="overwrite", schema_mode="overwrite",
                    target_file_size=target_file_size, commit_properties=props)


def widened_schema(current: pa.Schema, batch: pa.Schema, change: SchemaDiff) -> pa.Schema:
    """The table's schema with each widened column at the batch's type and the batch's new columns appended;
    a column the batch lacks becomes nullable (its new rows hold NULL)."""
    wider = {c.column for c in change.widened}
    fields = [pa.field(f.name, batch.field(f.name).type, True) if f.name in wider
              else f if f.name in batch.names else f.with_nullable(True) for f in current]
    names = set(current.names)
    fields += [pa.field(f.name, f.type, True) for f in batch if f.name not in names]
    return pa.schema(fields)


def merged_rows(
    dt: DeltaTable, batch: pa.Table, *, schema: pa.Schema, primary_key: list[str], last_modified: str
) -> pa.RecordBatchReader:
    """The rows a MERGE of ``batch`` into ``dt`` would leave, in ``schema``, as a stream.

    As in the MERGE, a replaced row keeps its values of the columns the batch lacks (the source dropped them).
    """
    absent = [c for c in schema.names if c not in batch.column_names]
    batch = conform(batch, schema)
    keys = batch.select([*primary_key, last_modified]).rename_columns([*primary_key, _BATCH_LM])
    losers: list[pa.Table] = []
    carried: list[pa.Table] = []
    # Built here, not in the generator: delta-rs consumes the generator from inside its own runtime.
    existing_rows = dt.to_pyarrow_dataset()

    def rows() -> Iterator[pa.RecordBatch]:
        for record_batch in existing_rows.to_batches():
            if record_batch.num_rows == 0:
                continue
            existing = conform(pa.Table.from_batches([record_batch]), schema)
            numbered = existing.select([*primary_key, last_modified]).append_column(
                _ROW, pa.array(range(existing.num_rows), pa.int64()))
            joined = numbered.join(keys, keys=primary_key, join_type="inner")
            newer = pc.greater_equal(joined[_BATCH_LM], joined[last_modified])
            replaced = joined.filter(newer)[_ROW]
            losers.append(joined.filter(pc.invert(newer)).select(primary_key))
            if absent:
                carried.append(existing.take(replaced).select([*primary_key, *absent]))
            kept = existing.filter(pc.invert(pc.is_in(pa.array(range(existing.num_rows), pa.int64()), replaced)))
            yield from kept.to_batches()
        winners = batch
        beaten = pa.concat_tables(losers) if losers else None
        if beaten is not None and beaten.num_rows:
            winners = winners.join(beaten, keys=primary_key, join_type="left anti")
        if carried:
            winners = winners.drop_columns(absent).join(pa.concat_tables(carried), keys=primary_key, join_type="left outer")
        yield from conform(winners, schema).to_batches()

    return pa.RecordBatchReader.from_batches(schema, rows())

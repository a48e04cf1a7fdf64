"""A staged batch in Delta's own types, as delta-rs takes it, with the ``mid_publish`` crash point."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from incsync.core.crashpoints import crash_point
from incsync.destinations.types import delta_form, to_delta
from incsync.staging.batch import StagedBatch


def batch_reader(batch: StagedBatch) -> pa.RecordBatchReader:
    """The staged rows, with the ``mid_publish`` crash point once delta-rs has consumed them all."""
    reader = batch.reader()
    schema = delta_form(reader.schema)  # Delta's own types for time of day and wide decimals (docs/types.md)
    return crash_after(pa.RecordBatchReader.from_batches(schema, (to_delta(b, schema) for b in reader)))


def batch_table(batch: StagedBatch) -> pa.Table:
    """The staged rows in Delta's types, in memory (a widening rewrite or a MERGE of fixes holds them)."""
    table = batch.table()
    schema = delta_form(table.schema)
    return pa.Table.from_batches([to_delta(b, schema) for b in table.to_batches()], schema)


def crash_after(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        yield from reader
        crash_point("mid_publish")

    return pa.RecordBatchReader.from_batches(reader.schema, batches())

"""What publish learns of a whole staged span before splitting it in commits (docs/design.md#counts):
the window counts and that no last-modified is NULL (whether its keys are unique: ``keys.py``). Read a
scan batch at a time, only the columns needed, so no step holds a column of the whole span: a big tenant's
backfill stages millions of rows, and memory must follow ``max_rows_per_batch``, not the tenant (docs/operations.md,
"Sizing memory")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from incsync.config.model import ModelConfig
from incsync.staging.batch import SCAN_ROWS, StagedBatch
from incsync.transfer.keys import keys_unique
from incsync.transfer.plan import HasWindow, WindowCounter, WindowCounts
from incsync.transfer.validate import missing_columns, refuse_null_last_modified

__all__ = ["count_windows", "keys_unique", "micros"]

def micros(values: pa.Array) -> np.ndarray:
    """Non-null timestamps (or dates) as int64 microseconds since the epoch."""
    return pc.cast(pc.cast(values, pa.timestamp("us", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False)


def count_windows(
    batch: StagedBatch, windows: Sequence[HasWindow], *, model: ModelConfig, recipient_id: str,
    delta_after_micros: int | None, batch_size: int = SCAN_ROWS,
) -> WindowCounts:
    """Each window's rows, new rows and greatest last-modified (``count_by_window``), in one pass over
    the last-modified column. Refuses a span holding NULL last-modified rows: such a row fits no window
    and no commit (the error names up to ten of their keys, read in a second, filtered pass)."""
    lm = model.last_modified_column
    where = f"model {model.model_name}, recipient {recipient_id}"
    missing_columns(batch, model=model, where=where)
    counter = WindowCounter(windows, delta_after_micros=delta_after_micros)
    nulls = 0
    for part in batch.batches([lm], batch_size=batch_size):
        values = part.column(0)
        nulls += values.null_count
        if not nulls:
            counter.add(micros(values))
    if nulls:
        columns = list(dict.fromkeys([*model.primary_key, lm]))
        refuse_null_last_modified(batch.dataset().to_table(columns=columns, filter=ds.field(lm).is_null()),
                                  model=model, where=where)
    return counter.counts()

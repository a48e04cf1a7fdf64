"""Whether a staged batch's primary key is unique, in 8 bytes a row instead of the key columns and a
hash table of them: Arrow's group-by holds many times more memory for the same keys."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from incsync.staging.batch import SCAN_ROWS, StagedBatch


def keys_unique(batch: StagedBatch, primary_key: Sequence[str], *, batch_size: int = SCAN_ROWS) -> bool:
    """Whether no primary key occurs twice in the whole span.

    Holds 8 bytes a row, not the key columns: an integer key itself, any other key as a 64-bit hash of
    its values, sorted to find repeats. Hashes that repeat (a duplicate, or a collision) are settled by
    the key columns themselves, so the answer is exact.
    """
    if batch.rows == 0:
        return True
    pk = list(primary_key)
    fields = [batch.schema.field(c) for c in pk]
    integer = len(pk) == 1 and pa.types.is_integer(fields[0].type)
    if not integer and not all(_hashable(f.type) for f in fields):
        return _keys_unique_in_memory(batch, pk)
    codes = np.empty(batch.rows, dtype=np.int64 if integer else np.uint64)
    at = 0
    for part in batch.batches(pk, batch_size=batch_size):
        if any(column.null_count for column in part.columns):
            return _keys_unique_in_memory(batch, pk)  # a NULL key, refused by validation anyway
        chunk = _integers(part.column(0)) if integer else _hashes(part)
        codes[at : at + len(chunk)] = chunk
        at += len(chunk)
    codes = codes[:at]
    codes.sort()
    if not np.any(codes[1:] == codes[:-1]):
        return True
    return False if integer else _keys_unique_in_memory(batch, pk)


def _integers(values: pa.Array) -> np.ndarray:
    array = values.to_numpy(zero_copy_only=False)
    return array.view(np.int64) if array.dtype == np.uint64 else array.astype(np.int64, copy=False)


def _hashable(kind: pa.DataType) -> bool:
    """Types whose values pandas hashes by value (an extension type such as JSON text is left to Arrow)."""
    t = pa.types
    return not isinstance(kind, pa.ExtensionType) and (
        t.is_integer(kind) or t.is_string(kind) or t.is_large_string(kind) or t.is_binary(kind)
        or t.is_large_binary(kind) or t.is_boolean(kind) or t.is_timestamp(kind) or t.is_date(kind)
        or t.is_decimal(kind))


def _hashable_values(values: pa.Array) -> pa.Array:
    """Values as pandas hashes them: times as their integers (no datetime64 overflow at ±infinity's
    extremes), decimals as their text (a decimal type has one scale, so one text a value)."""
    kind = values.type
    if pa.types.is_timestamp(kind) or pa.types.is_date64(kind):
        return values.cast(pa.int64())
    if pa.types.is_date32(kind):
        return values.cast(pa.int32())
    if pa.types.is_decimal(kind):
        return values.cast(pa.string())
    return values


def _hashes(part: pa.RecordBatch) -> np.ndarray:
    import pandas as pd

    frame = pd.DataFrame({str(i): _hashable_values(part.column(i)).to_pandas() for i in range(part.num_columns)})
    return pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)


def _keys_unique_in_memory(batch: StagedBatch, pk: list[str]) -> bool:
    keys = batch.table(columns=pk)
    if len(pk) == 1:
        return pc.count_distinct(keys[pk[0]], mode="all").as_py() == keys.num_rows
    return keys.group_by(pk).aggregate([]).num_rows == keys.num_rows

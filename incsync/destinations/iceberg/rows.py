"""The upsert of an Iceberg publish, computed in Arrow: which stored rows a batch replaces, stamps or removes.

pyiceberg has no MERGE with a condition (its ``upsert`` replaces a row whenever any value differs, with no
last-modified tie-break), so the publish reads the data files that may hold the batch's keys, and this
module decides, per key, as the other destinations' MERGE/UPDATE does: a batch row replaces the stored one
when its last-modified is newer, or as new with other values (``force``: whenever values differ); new keys
are inserted; an unchanged row is left alone. Removals delete keys or stamp ``_incsync_deleted_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from incsync.destinations.base import DELETED_AT, Removals


@dataclass(frozen=True)
class Upsert:
    """What one publish writes: ``rows`` appended, the stored rows under ``touched`` (a mask over the rows read) dropped."""

    rows: pa.Table
    touched: np.ndarray
    written: int
    removed: int


def match(left: pa.Table, right: pa.Table, keys: list[str]) -> np.ndarray:
    """For each row of ``left``, the index of ``right``'s row with the same key, or -1 (``right``'s keys are unique)."""
    if left.num_rows == 0 or right.num_rows == 0:
        return np.full(left.num_rows, -1, dtype=np.int64)
    lk = left.select(keys).append_column("__l", pa.array(np.arange(left.num_rows, dtype=np.int64)))
    rk = right.select(keys).append_column("__r", pa.array(np.arange(right.num_rows, dtype=np.int64)))
    joined = lk.join(rk, keys=keys, join_type="inner")
    found = np.full(left.num_rows, -1, dtype=np.int64)
    found[joined["__l"].to_numpy()] = joined["__r"].to_numpy()
    return found


def _distinct(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
    """SQL's IS DISTINCT FROM, row by row (NaN equals NaN, as in PostgreSQL)."""
    t = a.type
    if pa.types.is_nested(t):
        return np.array([x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)], dtype=bool)
    equal = pc.equal(a, b)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    same = pc.if_else(pc.is_null(equal), both_null, equal)
    if pa.types.is_floating(t):
        same = pc.or_(same, pc.and_(pc.fill_null(pc.is_nan(a), False), pc.fill_null(pc.is_nan(b), False)))
    return ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)


def _take(table: pa.Table, index: np.ndarray) -> pa.Table:
    return table.take(pa.array(index, type=pa.int64()))


def upsert(stored: pa.Table, batch: pa.Table, *, keys: list[str], last_modified: str, brought: list[str],
           force: bool, removals: Removals | None, removal_keys: pa.Table | None) -> Upsert:
    """``batch`` holds the table's columns; ``brought`` names those the source sent (the others, columns
    the source dropped, keep their stored values in a replaced row). ``stored`` may hold other keys too."""
    touched = np.zeros(stored.num_rows, dtype=bool)
    at = match(batch, stored, keys)
    found = at >= 0
    aligned = _take(stored, np.where(found, at, 0)) if stored.num_rows else batch.slice(0, 0)
    compared = [c for c in brought if c not in keys and (force or c != last_modified)]
    differ = np.zeros(batch.num_rows, dtype=bool)
    if stored.num_rows:
        for c in compared:
            differ |= _distinct(batch[c], aligned[c])
    if force:
        take = ~found | differ
    else:
        def compared(op: Callable[..., pa.ChunkedArray]) -> np.ndarray:
            if not stored.num_rows:
                return np.zeros(batch.num_rows, bool)
            both = op(batch[last_modified], aligned[last_modified])
            return np.asarray(pc.fill_null(both, False).to_numpy(zero_copy_only=False))

        newer, tie = compared(pc.greater), compared(pc.equal)
        take = ~found | (found & (newer | (tie & differ)))
    columns = []
    for f in batch.schema:
        if f.name in brought or f.name == DELETED_AT or not stored.num_rows:
            columns.append(batch[f.name] if f.name != DELETED_AT else pa.nulls(batch.num_rows, f.type))
        else:  # a column the source dropped: a replaced row keeps its stored value
            columns.append(pc.if_else(pa.array(found), aligned[f.name], batch[f.name]))
    winners = pa.Table.from_arrays(columns, schema=batch.schema)
    parts = []
    if removals is not None and removal_keys is not None and removals.rows:
        gone = match(winners, removal_keys, keys) >= 0  # a key both upserted and removed ends removed
        take &= ~gone
    picked = np.flatnonzero(take)
    parts.append(_take(winners, picked))
    touched[at[picked][found[picked]]] = True
    if DELETED_AT in stored.column_names and stored.num_rows:
        # A key back at the source is no longer deleted, whichever version wins.
        stamped = found & ~take & np.asarray(pc.is_valid(aligned[DELETED_AT]).to_numpy(zero_copy_only=False))
        if stamped.any():
            back = _take(stored, at[stamped])
            parts.append(back.set_column(back.schema.get_field_index(DELETED_AT), DELETED_AT,
                                         pa.nulls(back.num_rows, back.schema.field(DELETED_AT).type)))
            touched[at[stamped]] = True
    removed = 0
    if removals is not None and removal_keys is not None and removals.rows and stored.num_rows:
        hit = match(removal_keys, stored, keys)
        hit = np.unique(hit[hit >= 0])
        if removals.mode == "soft":
            hit = hit[~np.asarray(pc.is_valid(_take(stored, hit)[DELETED_AT]).to_numpy(zero_copy_only=False))]
            rows = _take(stored, hit)
            index = rows.schema.get_field_index(DELETED_AT)
            parts.append(rows.set_column(index, DELETED_AT, pa.array([removals.at] * len(hit), rows.schema.field(DELETED_AT).type)))
        touched[hit] = True
        removed = len(hit)
    out = pa.concat_tables([p.cast(batch.schema) for p in parts]) if parts else batch.slice(0, 0)
    return Upsert(rows=out, touched=touched, written=len(picked), removed=removed)

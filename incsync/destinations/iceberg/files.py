"""The data files of an Iceberg publish: read those that may hold a batch's keys, rewrite them, commit one snapshot.

Copy-on-write, as pyiceberg writes: a data file holding a replaced or removed row is rewritten without it,
and the commit's one snapshot drops the old file and adds the new ones (OVERWRITE), or only adds (APPEND).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from incsync.core.schema_change import SchemaDiff
from incsync.destinations.base import DELETED_AT
from incsync.destinations.iceberg.compat import scan_files, table_io, write_data_files
from incsync.destinations.iceberg.types import iceberg_type

# A batch with more keys than this selects candidate files by its integer key's range rather than a list.
KEY_LIST_LIMIT = 10_000


if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction


def arrow_schema(schema: Schema) -> pa.Schema:
    """An Iceberg schema as the Arrow pyiceberg reads it back (strings as ``string``, no field ids)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else
                               pa.binary() if pa.types.is_large_binary(f.type) else f.type) for f in arrow])


def adapt(tx: Transaction, change: SchemaDiff, form: pa.Schema, *, replace_columns: list[str], stamp: bool) -> None:
    """The batch's new columns, widenings, a full refresh's replaced columns and the soft-delete stamp, in the
    publish's transaction (replaced: dropped and added again, a new field id, since Iceberg cannot cast data)."""
    from pyiceberg.types import TimestamptzType

    if replace_columns:
        with tx.update_schema() as update:
            for column in replace_columns:
                update.delete_column(column)
    replaced = set(replace_columns)
    with tx.update_schema() as update:
        for column in replace_columns:
            update.add_column(column, iceberg_type(form.field(column).type))
        for column, _ in change.added:
            update.add_column(column, iceberg_type(form.field(column).type))
        for c in change.widened:
            if c.column not in replaced:
                update.update_column(c.column, iceberg_type(form.field(c.column).type))
        if stamp:
            update.add_column(DELETED_AT, TimestamptzType())


def data_files(tx: Transaction) -> list:
    """Every data file of the transaction's current snapshot."""
    return [task.file for task in scan_files(tx)]


def _key_filter(keys: list[str], batch: pa.Table, removal_keys: pa.Table | None) -> BooleanExpression:
    from pyiceberg.expressions import AlwaysFalse, And, GreaterThanOrEqual, In, LessThanOrEqual

    first = keys[0]
    values = [batch[first]] + ([removal_keys[first]] if removal_keys is not None else [])
    column = pa.chunked_array([c.cast(batch.schema.field(first).type) for v in values for c in v.chunks],
                              batch.schema.field(first).type)
    unique = pc.unique(column).drop_null()
    if len(unique) == 0:
        return AlwaysFalse()
    if len(unique) > KEY_LIST_LIMIT and pa.types.is_integer(column.type):
        bounds = pc.min_max(unique)
        return And(GreaterThanOrEqual(first, bounds["min"].as_py()), LessThanOrEqual(first, bounds["max"].as_py()))
    return In(first, unique.to_pylist())


def read_candidates(tx: Transaction, *, keys: list[str], batch: pa.Table, removal_keys: pa.Table | None) -> tuple[list, pa.Table]:
    """The files whose statistics admit a batch key (or a removal key) with their row counts, and all their rows."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if tx.table_metadata.current_snapshot() is None:
        return [], pa.Table.from_batches([], schema=arrow_schema(tx.table_metadata.schema()))
    tasks = scan_files(tx, _key_filter(keys, batch, removal_keys))
    schema = arrow_schema(tx.table_metadata.schema())
    tables = []
    for task in tasks:
        read = ArrowScan(table_metadata=tx.table_metadata, io=table_io(tx), projected_schema=tx.table_metadata.schema(),
                         row_filter=AlwaysTrue()).to_table(tasks=[task])
        tables.append(read.cast(schema))
    tasks = [(task.file, t.num_rows) for task, t in zip(tasks, tables, strict=True)]
    return tasks, (pa.concat_tables(tables) if tables else pa.Table.from_batches([], schema=schema))


def rewrites(tasks: list, stored: pa.Table, touched: np.ndarray) -> tuple[list, list[pa.Table]]:
    """The files holding a touched row (to drop) and their untouched rows (to write again)."""
    drop, kept, start = [], [], 0
    for file, n in tasks:
        part = touched[start:start + n]
        if part.any():
            drop.append(file)
            rest = stored.slice(start, n).filter(pa.array(~part))
            if rest.num_rows:
                kept.append(rest)
        start += n
    assert start == stored.num_rows, (start, stored.num_rows)
    return drop, kept


def commit_snapshot(tx: Transaction, *, rows: pa.Table, drop: list, summary: dict[str, str]) -> None:
    """One snapshot in the transaction: ``drop``'s files out, ``rows`` in (an empty APPEND still carries the summary)."""
    update = tx.update_snapshot(snapshot_properties=summary)
    with (update.overwrite() if drop else update.fast_append()) as producer:
        for f in drop:
            producer.delete_data_file(f)
        if rows.num_rows:
            for f in write_data_files(tx, write_uuid=producer.commit_uuid, rows=rows):
                producer.append_data_file(f)


def missing(table: Table) -> str | None:
    """Why the table cannot be read: a data file of its current snapshot is gone from storage."""
    if table.current_snapshot() is None:
        return None
    for task in table.scan().plan_files():
        if not table.io.new_input(task.file.file_path).exists():
            return f"data file {task.file.file_path} of Iceberg table {'.'.join(table.name())} is missing"
    return None


__all__ = ["adapt", "arrow_schema", "commit_snapshot", "data_files", "read_candidates", "rewrites"]

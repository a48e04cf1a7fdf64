"""Loading a staged batch by COPY into the publish's temporary stage table (or straight into a table that
holds none of its keys yet): in PostgreSQL's binary format where every column has an exact one
(``binary``), else as CSV where every column allows, else row by row.
PostgreSQL's own 'infinity' / '-infinity', staged as the extremes of dates and timestamps, go back as that text."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql

from incsync.core.crashpoints import crash_point
from incsync.destinations.postgres import binary
from incsync.destinations.postgres.types import jsonish
from incsync.staging.batch import StagedBatch
from incsync.staging.infinity import infinities_as_text

STAGE_TABLE = "_incsync_stage"
STAGE = sql.Identifier("pg_temp", STAGE_TABLE)  # qualified, so a user table of that name is never touched


def load_stage(conn: psycopg.Connection, batch: StagedBatch, wanted: dict[str, str]) -> None:
    """Create the stage table (``create_stage``) and COPY the batch in."""
    create_stage(conn, wanted)
    copy_rows(conn, batch, wanted, into=STAGE)


def create_stage(conn: psycopg.Connection, wanted: dict[str, str]) -> None:
    """Create the stage table with the columns ``wanted`` (name → PostgreSQL type) in the publish
    transaction. The table goes with the transaction (``ON COMMIT DROP``, or its rollback), so a pooled
    session keeps none between publishes."""
    with conn.pipeline():  # BEGIN, DROP and CREATE in one round trip
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(STAGE))
        conn.execute(
            sql.SQL("CREATE TABLE {} ({}) ON COMMIT DROP").format(
                STAGE, sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in wanted.items())
            )
        )


def copy_rows(conn: psycopg.Connection, batch: StagedBatch, wanted: dict[str, str], *, into: sql.Composable,
              exact: bool = True) -> None:
    """COPY the batch's rows into the table ``into`` (the stage, or the model's table itself when it can
    hold none of the batch's keys yet), its columns ``wanted``; ``exact``: the table's columns have exactly
    the ``wanted`` types (a binary value must), as the stage's always do."""
    if not batch.files:
        return
    columns = sql.SQL(", ").join(map(sql.Identifier, wanted))
    form = binary.encoder(batch, wanted) if exact else None
    if form is not None:
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(into, columns)) as copy:
            copy.write(form.encoder.write_header())
            for record_batch in batch.reader():
                copy.write(form.encode(record_batch))
                crash_point("mid_copy")
            copy.write(form.encoder.finish())
        return
    if _csv_safe(batch.schema) and "bytea" not in wanted.values():
        # Arrow writes the CSV in C, far faster than adapting row by row. Quoting every value keeps
        # empty strings apart from NULLs (unquoted empty fields), and JSON text's 'null' apart from NULL.
        options = pacsv.WriteOptions(include_header=False, quoting_style="all_valid")
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(into, columns)) as copy:
            for record_batch in batch.reader():
                sink = io.BytesIO()
                pacsv.write_csv(_csv_storage(infinities_as_text(record_batch)), sink, options)
                copy.write(sink.getvalue())
                crash_point("mid_copy")
        return
    json_columns = [i for i, f in enumerate(batch.schema) if jsonish(f)]
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(into, columns)) as copy:
        for row in _rows(batch, json_columns):
            copy.write_row(row)


def _csv_safe(schema: pa.Schema) -> bool:
    """Every column is one Arrow's CSV writer can write as PostgreSQL reads it: no nested values (they
    become JSON in Python), and extension types (JSON text) only over string storage."""
    def plain(t: pa.DataType) -> bool:
        if isinstance(t, pa.ExtensionType):
            return pa.types.is_string(t.storage_type) or pa.types.is_large_string(t.storage_type)
        return not pa.types.is_nested(t)
    return all(plain(f.type) for f in schema)


def _csv_storage(record_batch: pa.RecordBatch) -> pa.Table:
    """The batch with extension columns (e.g. ``arrow.json``) as their string storage, which the CSV writer takes."""
    columns = [c.storage if isinstance(c.type, pa.ExtensionType) else c for c in record_batch.columns]
    return pa.Table.from_arrays(columns, names=record_batch.schema.names)


def _rows(batch: StagedBatch, json_columns: list[int]) -> Iterator[list[object]]:
    reader = batch.reader()
    for record_batch in reader:
        columns = [col.to_pylist() for col in infinities_as_text(record_batch).columns]
        for i in json_columns:
            columns[i] = [None if v is None else json.dumps(v, default=str) for v in columns[i]]
        yield from (list(r) for r in zip(*columns, strict=True))

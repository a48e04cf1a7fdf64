"""Loading a staged batch into the publish's temporary stage table, before its transaction begins.

The stage (``CREATE TEMPORARY TABLE``: private to the session, gone with it, no implicit commit) has the
target's column types and the primary key. Rows go in by ``LOAD DATA LOCAL INFILE`` of a CSV that Arrow
writes in C (every value quoted, NULL as the bare word), several times faster than PyMySQL's multi-row
``INSERT`` (``benchmarks/mariadb_load.py``). MariaDB turns
a LOCAL load's data errors into warnings, so any warning fails the publish naming the column: a value
is loaded exactly or not at all. Binary values travel as hex, nested values as JSON text.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pymysql

from incsync.destinations.mariadb.connect import Connection, quote, rows, run, table
from incsync.destinations.mariadb.types import column_type, json_columns, key_chars, refuse_non_finite
from incsync.destinations.types import _as_text
from incsync.errors import PublishError
from incsync.staging.batch import StagedBatch

STAGE = "_incsync_stage"
LOCAL_REFUSED = (1148, 3948, 4166)  # the server or the client has local files off (MySQL 5.7, MySQL 8, MariaDB)
_CSV = pacsv.WriteOptions(include_header=False, quoting_style="all_valid", null_string="NULL")


def create_stage(conn: Connection, database: str, form: pa.Schema, *, key: tuple[str, ...], collation: str,
                 json: set[str]) -> None:
    """The session's stage table: the batch's columns (``form``) with the target's types, keyed like it."""
    chars = key_chars(form, key)
    def typed(f: pa.Field) -> str:
        return "JSON" if f.name in json else column_type(f, key_chars=chars if f.name in key else None, collation=collation)

    body = [f"{quote(f.name)} {typed(f)}"
            for f in form]
    body.append(f"PRIMARY KEY ({', '.join(map(quote, key))})")
    run(conn, f"DROP TEMPORARY TABLE IF EXISTS {table(database, STAGE)}")
    run(conn, f"CREATE TEMPORARY TABLE {table(database, STAGE)} ({', '.join(body)}) ENGINE=InnoDB")


def load_stage(conn: Connection, database: str, batch: StagedBatch, form: pa.Schema, *, key: tuple[str, ...],
               collation: str, where: str) -> None:
    """Create the stage and load the batch's rows into it (committed: the stage is the session's alone)."""
    nested = json_columns(batch.schema)
    create_stage(conn, database, form, key=key, collation=collation, json=nested)
    if not batch.files:
        return
    binary = [f.name for f in form if pa.types.is_binary(f.type)]
    targets = ", ".join(f"@v{i}" if f.name in binary else quote(f.name) for i, f in enumerate(form))
    sets = ", ".join(f"{quote(f.name)} = UNHEX(@v{i})" for i, f in enumerate(form) if f.name in binary)
    with tempfile.TemporaryDirectory(prefix="incsync-mariadb-") as folder:
        path = Path(folder) / "stage.csv"
        with path.open("wb") as sink:
            for record_batch in batch.reader():
                refuse_non_finite(record_batch, key, where=where)
                pacsv.write_csv(_text_form(record_batch, form, nested), sink, _CSV)
        statement = (f"LOAD DATA LOCAL INFILE %s INTO TABLE {table(database, STAGE)} CHARACTER SET utf8mb4 "
                     "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' LINES TERMINATED BY '\\n' "
                     f"({targets}){' SET ' + sets if sets else ''}")
        try:
            loaded = run(conn, statement, [str(path)])
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in LOCAL_REFUSED:
                raise PublishError(f"{where}: the MariaDB server refuses LOAD DATA LOCAL INFILE ({exc.args[1]}); nothing was "
                                   "published. Fix: SET GLOBAL local_infile = ON on the server (or local_infile=1 in its "
                                   "configuration)") from None
            raise
    warnings = rows(conn, "SHOW WARNINGS LIMIT 3")
    if warnings:
        listed = "; ".join(str(w[2]) for w in warnings)
        raise PublishError(f"{where}: a staged value does not fit its MariaDB column ({listed}); nothing was published. "
                           "Fix: cast or shorten the value in the model's source_query (a text key column holds at most 768 "
                           "characters, fewer in a key of several columns: docs/types.md).")
    if loaded != batch.rows:
        raise PublishError(f"{where}: {loaded} of the batch's {batch.rows} rows reached the MariaDB stage; nothing was "
                           "published (is a primary key repeated in the batch?)")


def _text_form(batch: pa.RecordBatch, form: pa.Schema, nested: set[str]) -> pa.Table:
    """The batch's columns as CSV-ready values: timestamps as their UTC wall clock, booleans as 1/0,
    decimals past DECIMAL(65,30) as their exact text, binary values as hex, nested values as JSON."""
    columns = []
    for f, column in zip(form, batch.columns, strict=True):
        t = column.type
        if f.name in nested:
            storage = column.storage if isinstance(t, pa.ExtensionType) else column
            values = storage.to_pylist()
            column = pa.array([None if v is None else (v if isinstance(v, str) else json.dumps(v, default=str))
                               for v in values], pa.string())
        elif pa.types.is_binary(f.type):
            column = pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string())
        elif pa.types.is_boolean(t):
            column = pc.cast(column, pa.int8())
        elif pa.types.is_timestamp(t):  # a zoned one as its UTC wall clock
            column = pc.cast(pc.cast(column, pa.timestamp("us", tz=t.tz)), pa.timestamp("us"))
        elif pa.types.is_decimal(t) and pa.types.is_string(f.type):
            column = _as_text(column)  # past DECIMAL(65,30): stored as its exact text
        columns.append(column)
    return pa.Table.from_arrays(columns, names=form.names)

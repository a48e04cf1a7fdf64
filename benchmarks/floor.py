"""The floor of workload A: one tenant's rows of ``orders`` moved into a new Delta table or PostgreSQL table
with no tool's machinery, so incsync's and dlt's times can be read against what the movement alone costs.

  delta     ADBC's PostgreSQL driver reads the tenant (binary COPY underneath) as Arrow record batches,
            delta-rs writes them as one new table
  postgres  ``COPY (SELECT ...) TO STDOUT (FORMAT binary)`` from the source streamed into ``COPY ... FROM
            STDIN (FORMAT binary)`` of a new table with the source's column types and primary key, one commit

Run by ``compare_dlt.py`` (tool ``floor``) as a fresh process; prints ``rows=<n> seconds=<s>``, the seconds
from the first connection to the commit (the interpreter's start and imports left out).

    .venv/bin/python benchmarks/floor.py --source-dsn postgresql://… --tenant big (--delta-path DIR | --dest-dsn postgresql://… --schema S)
"""

from __future__ import annotations

import argparse
import time

import psycopg
from psycopg import sql

COLUMNS = """id bigint PRIMARY KEY, organization_id text NOT NULL, status text, amount numeric(12,2), payload jsonb,
             updated_at timestamptz(6) NOT NULL"""  # compare_dlt.generate's table


def to_delta(source_dsn: str, tenant: str, path: str) -> int:
    import adbc_driver_postgresql.dbapi as adbc
    from deltalake import write_deltalake

    with adbc.connect(source_dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM orders WHERE organization_id = $1", parameters=(tenant,))
        table = cur.fetch_arrow_table()
    write_deltalake(path, table)
    return table.num_rows


def to_postgres(source_dsn: str, tenant: str, dest_dsn: str, schema: str) -> int:
    target = sql.Identifier(schema, "orders")
    with psycopg.connect(source_dsn) as src, psycopg.connect(dest_dsn) as dst:
        dst.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        dst.execute(sql.SQL(f"CREATE TABLE {{}} ({COLUMNS})").format(target))
        read = sql.SQL("COPY (SELECT * FROM orders WHERE organization_id = {}) TO STDOUT (FORMAT binary)").format(tenant)
        write = dst.cursor()
        with src.cursor().copy(read) as out, write.copy(sql.SQL("COPY {} FROM STDIN (FORMAT binary)").format(target)) as into:
            for chunk in out:
                into.write(chunk)
        return write.rowcount


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dsn", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--delta-path")
    parser.add_argument("--dest-dsn")
    parser.add_argument("--schema")
    args = parser.parse_args()
    started = time.monotonic()
    if args.delta_path:
        rows = to_delta(args.source_dsn, args.tenant, args.delta_path)
    else:
        rows = to_postgres(args.source_dsn, args.tenant, args.dest_dsn, args.schema)
    print(f"rows={rows} seconds={time.monotonic() - started:.3f}")


if __name__ == "__main__":
    main()

"""Helpers for the integrity tests: a PostgreSQL source of every common type, transfers into each
destination kind, and damage done to a destination behind incsync's back."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from incsync.config.load import load_config
from incsync.integrity.verify import VerifyResult, verify_recipient
from incsync_tests.support.destinations import destination_spec, mariadb_database
from incsync_tests.support.jdbc import PgDatabase
from incsync_tests.support.lake import JAN1_EPOCH, ts

TYPED_ORDERS = """CREATE TABLE orders (
    id bigint PRIMARY KEY, organization_id text NOT NULL, status text, amount numeric(12,2), paid boolean,
    shipped_at timestamptz(6), payload jsonb, updated_at timestamptz(6) NOT NULL)"""


def typed_rows(n: int = 20) -> list[tuple]:
    """``n`` rows of org_1 over Jan 1-2, with NULLs, negative decimals and microseconds; two rows of org_2."""
    rows = []
    for i in range(1, n + 1):
        rows.append((
            i, "org_1", None if i % 7 == 0 else f"s{i % 3}", None if i % 5 == 0 else Decimal(f"{i}.{i % 10}0") * (-1 if i % 4 == 0 else 1),
            None if i % 6 == 0 else i % 2 == 0, None if i % 3 == 0 else ts(1, 5, 0, 0, i), f'{{"a": {i}}}',
            ts(1 + (i % 2), i % 24, 0, 0, 100 + i),
        ))
    rows += [(1001, "org_2", "x", Decimal("1.00"), True, None, "{}", ts(1, 3)), (1002, "org_2", "y", None, None, None, None, ts(2, 3))]
    return rows


def insert(db: PgDatabase, rows: list[tuple]) -> None:
    for row in rows:
        db.execute("INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", row)


def config_for(root: Path, db: PgDatabase, kind: str, *, model: dict[str, Any] | None = None) -> Path:
    dest = destination_spec(kind)
    doc = {
        "sources": [{"name": "db", "vendor": "postgres", "jdbc_url": db.jdbc_url, "user": db.user}],
        "destinations": [dest],
        "models": [{
            "model_name": "orders", "source": "db", "source_table": "orders", "primary_key": ["id"],
            "last_modified_column": "updated_at", "organization_column": "organization_id",
            "max_transfer_time_window_seconds": 86400, "min_start_time_epoch": JAN1_EPOCH, **(model or {}),
        }],
        "recipients": [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def verify(config_path: Path, spark, tmp_path: Path, **kwargs: Any) -> VerifyResult:
    config = load_config(config_path)
    model = config.model("orders")
    return verify_recipient(config, model, config.recipient("acme"), spark=lambda: spark,
                            staging_root=tmp_path / "verify-staging", **kwargs)


Damage = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def damage_destination(kind: str, root: Path, change: Damage, *, dsn: str | None = None) -> None:
    """Rewrite the destination's rows with ``change`` (list of row dicts in, list out), as a careless
    hand or a broken tool would: no transfer record, no manifest change."""
    if kind == "delta":
        from deltalake import DeltaTable, write_deltalake

        dt = DeltaTable(str(root / "out/acme/orders"))
        table = dt.to_pyarrow_table()
        write_deltalake(dt, pa.Table.from_pylist(change(table.to_pylist()), schema=table.schema), mode="overwrite")
    elif kind == "duckdb":
        import duckdb

        with duckdb.connect(str(root / "out/acme.duckdb")) as con:
            con.execute("SET TimeZone = 'UTC'")
            before = con.sql("SELECT * FROM orders").to_arrow_table()
            con.register("changed", pa.Table.from_pylist(change(before.to_pylist()), schema=before.schema))
            con.execute("DELETE FROM orders")
            con.execute("INSERT INTO orders SELECT * FROM changed")
    elif kind == "iceberg":
        from pyiceberg.catalog.sql import SqlCatalog

        warehouse = root / "out/acme"
        table = SqlCatalog("incsync", uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri()).load_table("incsync.orders")
        before = table.scan().to_arrow()
        table.overwrite(pa.Table.from_pylist(change(before.to_pylist()), schema=before.schema))
    elif kind == "mariadb":
        import pymysql

        with pymysql.connect(host="127.0.0.1", user="root", database=mariadb_database(),
                             init_command="SET time_zone = '+00:00'") as conn:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute("SELECT * FROM orders")
                after = change(list(cur.fetchall()))
                names = [d[0] for d in cur.description]
                cur.execute("DELETE FROM orders")
                cur.executemany(f"INSERT INTO orders ({', '.join(f'`{n}`' for n in names)}) VALUES "
                                f"({', '.join(['%s'] * len(names))})", [[row[n] for n in names] for row in after])
            conn.commit()
    elif kind == "object_storage":
        files = sorted((root / "out/acme/orders").glob("recipient=acme/dt=*/*.parquet"))
        for n, f in enumerate(files):
            table = pq.read_table(f)
            rows = change(table.to_pylist())
            if n:  # rows the change adds go to the first file only
                before = {r["id"] for r in table.to_pylist()}
                rows = [r for r in rows if r["id"] in before]
            pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), f)
    else:
        import psycopg

        with psycopg.connect(dsn, autocommit=False) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            cur = conn.execute("SELECT * FROM acme.orders")
            names = [d.name for d in cur.description]
            before = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
            after = change(before)
            conn.execute("DELETE FROM acme.orders")
            cols = ", ".join(f'"{c}"' for c in names)
            with conn.cursor() as c, c.copy(f"COPY acme.orders ({cols}) FROM STDIN") as copy:
                from psycopg.types.json import Jsonb

                for row in after:
                    copy.write_row([Jsonb(row[n]) if isinstance(row[n], (dict, list)) else row[n] for n in names])
            conn.commit()


def every_damage(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Row 1 deleted (missing), row 2's status changed (incorrect), row 3's last-modified moved back an
    hour (stale), row 9999 added (orphaned)."""
    out = []
    for row in rows:
        row = dict(row)
        if row["id"] == 1:
            continue
        if row["id"] == 2:
            row["status"] = "tampered"
        if row["id"] == 3:
            row["updated_at"] = row["updated_at"] - timedelta(hours=1)
        out.append(row)
    extra = dict(rows[0])
    extra.update(id=9999, status="extra")
    return [*out, extra]

"""Run one JDBC transfer into one destination kind without Dagster, for the type and identifier tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync.sources.registry import build_source
from incsync.transfer.execute import run_transfer
from incsync.transfer.request import TransferOutcome, TransferRun
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_spec
from incsync_tests.support.jdbc import MariaDatabase, PgDatabase
from incsync_tests.support.lake import JAN1_EPOCH


def write_config(root: Path, db: PgDatabase | MariaDatabase, kind: str, tenant: str = "org_1", **model: Any) -> Path:
    """``incsync.yaml`` with model ``orders`` read from ``db`` for recipient acme (``tenant``) into ``kind``."""
    user = db.user if isinstance(db, PgDatabase) else "root"
    doc = {
        "sources": [{"name": "db", "vendor": db.vendor, "jdbc_url": db.jdbc_url, "user": user}],
        "destinations": [destination_spec(kind)],
        "models": [{
            "model_name": "orders",
            "source": "db",
            "source_table": "orders",
            "primary_key": ["id"],
            "last_modified_column": "updated_at",
            "organization_column": "organization_id",
            "max_transfer_time_window_seconds": 86400,
            "min_start_time_epoch": JAN1_EPOCH,
            "lookback_seconds": 0,
            **model,
        }],
        "recipients": [{"id": "acme", "id_in_provider_system": tenant, "destination": "acme_dest"}],
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def transfer(config_path: Path, spark: Any, window: str = "2024-01-01", recipient_id: str = "acme") -> TransferOutcome:
    """One backfill-style transfer of (orders, recipient, window) through the real source and destination."""
    config = load_config(config_path)
    model, recipient = config.model("orders"), config.recipient(recipient_id)
    request = TransferRun.for_model(
        config, model, source=build_source(config.source(model.source)), spark=lambda: spark,
    ).request(recipient, build_destination(config.destination(recipient.destination)), window)
    return run_transfer(request, staging_root=Path(os.environ["INCSYNC_STAGING_DIR"]))


def arrow_schema(config_path: Path) -> dict[str, str]:
    """Column -> Arrow type of the recipient's copy as its reader gives it back."""

    target = Target(config_path)
    return {f.name: str(f.type) for f in target.destination.read_rows(model=target.model, recipient=target.recipient).schema}


def rows_by(config_path: Path, *key: str) -> list[dict[str, Any]]:
    """The destination's current rows (object storage: newest per key), sorted by ``key``."""
    rows = Target(config_path).rows()
    return sorted(rows, key=lambda r: tuple(r[k] for k in key))


def pg_destination_rows(table: str = "orders", schema: str = "acme", *, json_as_text: bool = False) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The PostgreSQL destination's rows (as psycopg reads them; ``json_as_text``: json/jsonb as their text,
    so the JSON string "x" is not confused with the text x) and its column types (``format_type``)."""
    import psycopg
    from psycopg import sql
    from psycopg.types.string import TextLoader

    with psycopg.connect(os.environ[PG_DSN_ENV]) as conn:
        if json_as_text:
            for name in ("json", "jsonb"):
                conn.adapters.register_loader(name, TextLoader)
        conn.execute("SET TIME ZONE 'UTC'")
        cur = conn.execute(sql.SQL("SELECT * FROM {} ORDER BY 1").format(sql.Identifier(schema, table)))
        names = [d.name for d in cur.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        types = dict(conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped", [f'"{schema}"."{table}"'],
        ).fetchall())
    return rows, types


def delta_schema(root: Path) -> dict[str, str]:
    """Column -> Arrow type of the Delta table ``orders`` under ``root/out/acme``."""
    import pyarrow as pa
    from deltalake import DeltaTable

    return {f.name: str(f.type) for f in pa.schema(DeltaTable(str(root / "out/acme/orders")).schema().to_arrow())}


def parquet_schema(root: Path) -> dict[str, str]:
    """Column -> Arrow type of the object-storage files of ``orders`` under ``root/out/acme``."""
    import pyarrow.parquet as pq

    files = sorted((root / "out/acme/orders").rglob("*.parquet"))
    return {f.name: str(f.type) for f in pq.read_schema(files[0])}


def duckdb_schema(root: Path) -> dict[str, str]:
    """Column -> Arrow type of the DuckDB table ``orders`` in ``root/out/acme.duckdb``, as DuckDB gives it back."""
    import duckdb

    with duckdb.connect(str(root / "out/acme.duckdb"), read_only=True) as con:
        return {f.name: str(f.type) for f in con.sql("SELECT * FROM orders LIMIT 0").to_arrow_table().schema}


def iceberg_schema(root: Path) -> dict[str, str]:
    """Column -> Arrow type of the Iceberg table ``incsync.orders`` of the warehouse ``root/out/acme``, as pyiceberg reads it."""
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = root / "out/acme"
    catalog = SqlCatalog("incsync", uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri())
    return {f.name: str(f.type) for f in catalog.load_table("incsync.orders").scan().to_arrow().schema}

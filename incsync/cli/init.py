"""`incsync init --source postgres --destination delta`: a commented starter configuration that validates.

Every field is explained where it is set; docs/config.md lists them all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from incsync.cli.parsing import Commands
from incsync.errors import InputError

SOURCES = ("lake", "postgres", "mysql", "mariadb")
DESTINATIONS = ("delta", "postgres", "object_storage", "duckdb", "iceberg", "mariadb")

_SOURCE = {
    "lake": """\
  - name: lake
    vendor: lake
    path: ./data              # one folder per table: ./data/orders/*.parquet (relative to this file)
    format: parquet           # or csv (with a header line), json
""",
    "postgres": """\
  - name: app_db
    vendor: postgres
    jdbc_url: jdbc:postgresql://127.0.0.1:5432/app    # no password here
    user: incsync_reader                              # read-only credentials are enough
    password_env: APP_DB_PASSWORD                     # the variable holding the password: export it
""",
    "mysql": """\
  - name: app_db
    vendor: mysql
    jdbc_url: jdbc:mysql://127.0.0.1:3306/app         # no password here
    user: incsync_reader                              # read-only credentials are enough
    password_env: APP_DB_PASSWORD                     # the variable holding the password: export it
""",
    "mariadb": """\
  - name: app_db
    vendor: mariadb
    jdbc_url: jdbc:mariadb://127.0.0.1:3306/app       # no password here
    user: incsync_reader                              # read-only credentials are enough
    password_env: APP_DB_PASSWORD                     # the variable holding the password: export it
""",
}

_DESTINATION = {
    "delta": """\
  - name: acme_delta
    kind: delta
    path: ./out/acme          # one Delta table per model: ./out/acme/orders (created by the first transfer)
""",
    "postgres": """\
  - name: acme_pg
    kind: postgres
    dsn_env: ACME_DSN         # the variable holding postgresql://user@host:5432/db: export it
    schema: acme              # created when missing; one schema per recipient
""",
    "object_storage": """\
  - name: files
    kind: object_storage
    path: ./out/files         # Parquet files + manifests; recipients may share it (one folder each)
""",
    "duckdb": """\
  - name: acme_duckdb
    kind: duckdb
    path: ./out/acme.duckdb   # a DuckDB file (created when missing): one table per model; one recipient's copy
""",
    "iceberg": """\
  - name: acme_iceberg
    kind: iceberg
    path: ./out/acme_iceberg  # the warehouse: data + metadata files, and the SQLite catalog ./out/acme_iceberg/catalog.db
    namespace: acme           # the catalog namespace: table acme.orders; one recipient's copy
    # catalog_uri_env: ACME_CATALOG  # a PostgreSQL catalog instead: the variable holding postgresql://...
""",
    "mariadb": """\
  - name: acme_mariadb
    kind: mariadb             # MariaDB or MySQL (kind: mysql is the same)
    host: 127.0.0.1
    port: 3306
    user: incsync_writer      # needs CREATE, ALTER, SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES there
    password_env: ACME_MARIADB_PASSWORD  # the variable holding the password: export it (omit for none)
    database: acme            # created when missing: one table per model; one recipient's copy
""",
}

_DESTINATION_NAME = {"delta": "acme_delta", "postgres": "acme_pg", "object_storage": "files", "duckdb": "acme_duckdb",
                     "iceberg": "acme_iceberg", "mariadb": "acme_mariadb"}

TEMPLATE = """\
# incsync configuration: {source} -> {destination}. Written by `incsync init`; check it with
# `incsync validate -c {file}` (add --connect to reach the source), then `incsync transfer orders --dry-run`.
# Every field: docs/config.md. Secrets are never written here, only the names of the variables that hold them.

sources:
{source_block}
destinations:
{destination_block}
models:
  - model_name: orders                  # the asset, the destination table and the job are named after it
    source: {source_name}
    source_table: {table}               # or source_query: "SELECT ..."
    primary_key: [id]                   # upserts and validation use it
    last_modified_column: updated_at    # a timestamp set on every change: it drives the high watermark
    organization_column: organization_id  # the tenant column (or `tenancy: schema`: one schema per tenant)
    max_transfer_time_window_seconds: 86400  # daily windows (whole minutes/hours dividing a day also work)
    min_start_time_epoch: {start}       # first data to transfer (epoch seconds, UTC)
    frequency: "*/15 * * * *"           # the schedule (UTC cron): open window + the one just closed

recipients:
  - id: acme                            # the recipient partition key
    id_in_provider_system: "org_1"      # acme's value of organization_id
    destination: {destination_name}
"""


def starter_config(source: str, destination: str, *, file: str = "incsync.yaml", start: int = 1704067200) -> str:
    if source not in SOURCES:
        raise InputError(f'--source {source}: unknown; use one of {", ".join(SOURCES)}')
    if destination not in DESTINATIONS:
        raise InputError(f'--destination {destination}: unknown; use one of {", ".join(DESTINATIONS)}')
    return TEMPLATE.format(
        source=source, destination=destination, file=file, source_block=_SOURCE[source].rstrip("\n"),
        destination_block=_DESTINATION[destination].rstrip("\n"), source_name="lake" if source == "lake" else "app_db",
        table="orders" if source in ("lake", "mysql", "mariadb") else "public.orders", start=start,
        destination_name=_DESTINATION_NAME[destination],
    )


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.output)
    if target.exists() and not args.force:
        raise InputError(f"{target} exists; choose another file with -o, or overwrite it with --force")
    target.write_text(starter_config(args.source, args.destination, file=str(target)))
    print(f"wrote {target}: edit the names marked in its comments, then `incsync validate -c {target}`")
    return 0


def add_parser(sub: Commands) -> None:
    p = sub.add_parser("init", help="write a commented starter configuration")
    p.add_argument("--source", default="postgres", choices=SOURCES, help="the source's vendor (default postgres)")
    p.add_argument("--destination", default="delta", choices=DESTINATIONS, help="the destination's kind (default delta)")
    p.add_argument("-o", "--output", default="incsync.yaml", help="file to write (default incsync.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)

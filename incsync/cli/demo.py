"""`incsync demo`: a multi-tenant source, a few recipients, their backfill, then an incremental transfer."""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from incsync.cli.demo_share import SHARING_FILES, SHARING_LISTEN, share_step
from incsync.core.bounds import UTC

TENANTS = {"org_1": 0.32, "org_2": 0.24, "org_3": 0.18, "org_4": 0.12, "org_5": 0.09, "org_6": 0.05}
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta", "tags": {"tier": "gold"}},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_pg", "tags": {"tier": "silver"}},
    {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_files", "tags": {"tier": "silver"}},
]
DEMO_PG_DSN_ENV = "INCSYNC_DEMO_PG_DSN"
DEMO_PG_DATABASE = "incsync_demo"
DESTINATIONS = [
    {"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
    {"name": "globex_pg", "kind": "postgres", "dsn_env": DEMO_PG_DSN_ENV, "schema": "globex"},
    {"name": "initech_files", "kind": "object_storage", "path": "./out/initech"},
]
# `incsync demo --acme-destination KIND`: acme's copy in another kind of destination.
ACME_DESTINATIONS = {
    "delta": DESTINATIONS[0],
    "duckdb": {"name": "acme_duckdb", "kind": "duckdb", "path": "./out/acme.duckdb"},
    "iceberg": {"name": "acme_iceberg", "kind": "iceberg", "path": "./out/acme_iceberg", "namespace": "acme"},
}
GLOBEX_FALLBACK = {"name": "globex_pg", "kind": "object_storage", "path": "./out/globex"}
# `incsync demo --mariadb`: a fourth recipient whose copy is a MariaDB database on this machine.
DEMO_MARIADB_PASSWORD_ENV = "INCSYNC_DEMO_MARIADB_PASSWORD"  # set it when root has a password
UMBRELLA = {"id": "umbrella", "id_in_provider_system": "org_4", "destination": "umbrella_mariadb", "tags": {"tier": "silver"}}
UMBRELLA_MARIADB = {"name": "umbrella_mariadb", "kind": "mariadb", "host": "127.0.0.1", "port": 3306, "user": "root",
                    "database": "incsync_demo_umbrella"}
STATUSES = ["new", "paid", "shipped", "delivered", "cancelled", "refunded"]
DAYS = 6

ORDERS = pa.schema(
    [
        ("id", pa.int64()),
        ("organization_id", pa.string()),
        ("customer_email", pa.string()),
        ("status", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("currency", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)


def generate_orders(rows: int, *, start: datetime, end: datetime, seed: int = 7) -> pa.Table:
    """Realistic-looking orders over the tenants, skewed sizes, updates spread over [start, end)."""
    rng = np.random.default_rng(seed)
    orgs = rng.choice(list(TENANTS), size=rows, p=list(TENANTS.values()))
    span_us = int((end - start).total_seconds() * 1_000_000)
    start_us = int(start.timestamp() * 1_000_000)
    created = start_us + rng.integers(0, span_us, size=rows)
    updated = np.minimum(created + rng.integers(0, 6 * 3600 * 1_000_000, size=rows), start_us + span_us - 1)
    cents = rng.integers(100, 500_000, size=rows)
    return pa.table(
        {
            "id": pa.array(np.arange(1, rows + 1), pa.int64()),
            "organization_id": pa.array(orgs),
            "customer_email": pa.array([f"customer{n % 5000}@example.com" for n in rng.integers(0, 10**6, size=rows)]),
            "status": pa.array(rng.choice(STATUSES, size=rows)),
            "amount": pa.array([f"{c / 100:.2f}" for c in cents]).cast(pa.decimal128(12, 2)),
            "currency": pa.array(rng.choice(["USD", "EUR", "GBP"], size=rows)),
            "created_at": pa.array(created, pa.timestamp("us", tz="UTC")),
            "updated_at": pa.array(updated, pa.timestamp("us", tz="UTC")),
        },
        schema=ORDERS,
    )


def change_orders(table: pa.Table, *, now: datetime, fraction: float = 0.01, new_rows: int = 600, seed: int = 11) -> pa.Table:
    """Update ``fraction`` of the rows (status, amount, updated_at in the last minutes) and append new orders."""
    rng = np.random.default_rng(seed)
    rows = table.to_pylist()
    for i in rng.choice(len(rows), size=max(1, int(len(rows) * fraction)), replace=False):
        rows[i]["status"] = "refunded" if rows[i]["status"] == "cancelled" else "cancelled"
        rows[i]["updated_at"] = now - timedelta(seconds=int(rng.integers(1, 120)))
    next_id = len(rows) + 1
    fresh = generate_orders(new_rows, start=now - timedelta(seconds=120), end=now, seed=seed + 1).to_pylist()
    for j, row in enumerate(fresh):
        row["id"] = next_id + j
    return pa.Table.from_pylist(rows + fresh, schema=ORDERS)


def prepare_postgres() -> str | None:
    """A DSN for the demo's PostgreSQL recipient, its schema emptied; None when no server answers.

    ``$INCSYNC_DEMO_PG_DSN`` wins; otherwise database ``incsync_demo`` on 127.0.0.1:5432 is created.
    """
    import os

    import psycopg

    dsn = os.environ.get(DEMO_PG_DSN_ENV)
    if dsn is None:
        for user in ("postgres", "root"):
            try:
                with psycopg.connect(f"postgresql://{user}@127.0.0.1:5432/postgres", autocommit=True, connect_timeout=3) as admin:
                    if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DEMO_PG_DATABASE]).fetchone():
                        admin.execute(f'CREATE DATABASE "{DEMO_PG_DATABASE}"')
                dsn = f"postgresql://{user}@127.0.0.1:5432/{DEMO_PG_DATABASE}"
                break
            except psycopg.Error:
                continue
    if dsn is None:
        return None
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
            conn.execute("DROP SCHEMA IF EXISTS globex CASCADE")
    except psycopg.Error:
        return None
    os.environ[DEMO_PG_DSN_ENV] = dsn
    return dsn


def prepare_mariadb() -> dict[str, object] | None:
    """The umbrella recipient's MariaDB destination, its database dropped so the demo starts afresh; None
    when no server answers on 127.0.0.1:3306."""
    import pymysql

    spec = dict(UMBRELLA_MARIADB)
    if os.environ.get(DEMO_MARIADB_PASSWORD_ENV) is not None:
        spec["password_env"] = DEMO_MARIADB_PASSWORD_ENV
    try:
        with pymysql.connect(host="127.0.0.1", port=3306, user="root", connect_timeout=3,
                             password=os.environ.get(DEMO_MARIADB_PASSWORD_ENV, "")) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{spec['database']}`")
    except pymysql.MySQLError:
        return None
    return spec


UI_ENV_FILE = "ui.env"


def write_ui_env(workdir: Path, *, derived_dsn: bool) -> None:
    """``ui.env``: what the UI's runs need in their environment (`make ui` sources it). The DSN is written
    only when the demo derived it (a local trust login, no secret); a DSN you exported stays yours."""
    lines = ["# sourced by `make ui`: the environment the demo's runs need"]
    if derived_dsn and os.environ.get(DEMO_PG_DSN_ENV):
        lines.append(f"{DEMO_PG_DSN_ENV}={os.environ[DEMO_PG_DSN_ENV]}")
    (workdir / UI_ENV_FILE).write_text("\n".join(lines) + "\n")


def ui_command(workdir: Path) -> str:
    home, config = (workdir / ".dagster").resolve(), (workdir / "incsync.yaml").resolve()
    return (f"incsync dagster-yaml -c {config} --base dagster.yaml -o {home}/dagster.yaml && "
            f"set -a && . {workdir.resolve() / UI_ENV_FILE} && set +a && "
            f"INCSYNC_CONFIG={config} DAGSTER_HOME={home} dagster dev -w workspace.yaml")


def write_config(workdir: Path, *, start_epoch: int, postgres: bool = True, acme: str = "delta",
                 mariadb: dict[str, object] | None = None) -> Path:
    destinations = DESTINATIONS if postgres else [d if d["kind"] != "postgres" else GLOBEX_FALLBACK for d in DESTINATIONS]
    destinations = [ACME_DESTINATIONS[acme], *destinations[1:]]
    recipients = [{**RECIPIENTS[0], "destination": ACME_DESTINATIONS[acme]["name"]}, *RECIPIENTS[1:]]
    recipients = [*recipients, UMBRELLA] if mariadb else recipients
    destinations = [*destinations, mariadb] if mariadb else destinations
    doc = {
        "sources": [{"name": "shop", "vendor": "lake", "path": "./source", "format": "parquet"}],
        "destinations": destinations,
        "models": [
            {
                "model_name": "orders",
                "source": "shop",
                "source_table": "orders",
                "columns": [f.name for f in ORDERS],
                "primary_key": ["id"],
                "last_modified_column": "updated_at",
                "organization_column": "organization_id",
                "max_transfer_time_window_seconds": 86_400,
                "min_start_time_epoch": start_epoch,
                "frequency": "*/15 * * * *",
            }
        ],
        "recipients": recipients,
        "staging_dir": "./staging",
        # `incsync serve`: each recipient's Delta or Iceberg copy through Delta Sharing and an Iceberg REST catalog
        "sharing": {"listen": SHARING_LISTEN, "tables": {"orders": {"schema": "sales"}}},
    }
    path = workdir / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _write_source(workdir: Path, table: pa.Table) -> None:
    folder = workdir / "source" / "orders"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-0.parquet", row_group_size=32_768)


def verify(config_file: Path, source: pa.Table) -> list[str]:
    """Each recipient's destination holds exactly its tenant's source rows."""
    import pyarrow.compute as pc

    from incsync.config.load import load_config
    from incsync.destinations.registry import build_destination

    config = load_config(config_file)
    model = config.model("orders")
    problems = []
    for recipient in config.recipients:
        destination = build_destination(config.destination(recipient.destination))
        got = destination.current_rows(model=model, recipient=recipient).select(["id", "status", "updated_at"])
        want = source.filter(pc.equal(source["organization_id"], recipient.id_in_provider_system))
        want = want.select(["id", "status", "updated_at"])
        if sorted(got.to_pylist(), key=lambda r: r["id"]) != sorted(want.to_pylist(), key=lambda r: r["id"]):
            problems.append(f"{recipient.id}: destination has {got.num_rows} rows, source has {want.num_rows}")
    return problems


def run_demo(workdir: Path, *, rows: int = 120_000, acme: str = "delta", mariadb: bool = False) -> int:
    """Build everything under ``workdir`` from scratch (idempotent), transfer, verify, print per-transfer lines."""
    from incsync.config.load import load_config
    from incsync.core.windows import recipient_windows, scheduled_windows
    from incsync.operations.instance import dagster_instance
    from incsync.operations.runs import run_transfers
    from incsync.orchestration.definitions import build_definitions

    began = time.monotonic()
    workdir = workdir.resolve()
    for part in ("source", "out", "staging", ".dagster", "incsync.yaml", *SHARING_FILES):
        target = workdir / part
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    for old in workdir.glob("*.share"):  # an earlier run's profiles: their tokens died with its token store
        old.unlink()
    workdir.mkdir(parents=True, exist_ok=True)

    now = datetime.now(UTC).replace(microsecond=0)
    start = (now - timedelta(days=DAYS)).replace(hour=0, minute=0, second=0)
    source = generate_orders(rows, start=start, end=now - timedelta(minutes=10))
    _write_source(workdir, source)
    dsn_was_given = bool(os.environ.get(DEMO_PG_DSN_ENV))
    postgres = prepare_postgres() is not None
    umbrella = prepare_mariadb() if mariadb else None
    config_file = write_config(workdir, start_epoch=int(start.timestamp()), postgres=postgres, acme=acme, mariadb=umbrella)
    config = load_config(config_file)
    model = config.model("orders")
    print(f"demo in {workdir}: {source.num_rows} orders over {len(TENANTS)} tenants since {start:%Y-%m-%d}")
    if not postgres:
        print(f"no PostgreSQL at 127.0.0.1:5432 (or ${DEMO_PG_DSN_ENV}): globex gets an object-storage destination instead")
    if mariadb and umbrella is None:
        print("no MariaDB at 127.0.0.1:3306 (root, password in $INCSYNC_DEMO_MARIADB_PASSWORD if any): umbrella is left out")
    print("destinations: " + ", ".join(f"{r.id} -> {config.destination(r.destination).kind}" for r in config.recipients))
    print(f"config {config_file}; Dagster instance {workdir / '.dagster'}")
    write_ui_env(workdir, derived_dsn=postgres and not dsn_was_given)

    os.environ["DAGSTER_HOME"] = str(workdir / ".dagster")
    defs = build_definitions(config_file)
    instance = dagster_instance(config_file)
    failed = 0

    def show(line: object) -> None:
        print(f"  {line}", flush=True)

    print("\n1. backfill")
    for recipient in config.recipients:
        lines = run_transfers(defs, instance, config=config, model=model, recipient=recipient,
                              windows=[w.key for w in recipient_windows(model, recipient)], progress=show)
        failed += sum(not line.ok for line in lines)

    changed = change_orders(source, now=now)
    _write_source(workdir, changed)
    print(f"\n2. source changed: {int(source.num_rows * 0.01)} orders updated, {changed.num_rows - source.num_rows} new")

    print("\n3. incremental (what a schedule tick runs)")
    for recipient in config.recipients:
        lines = run_transfers(defs, instance, config=config, model=model, recipient=recipient,
                              windows=[w.key for w in scheduled_windows(model)], scheduled=True, progress=show)
        failed += sum(not line.ok for line in lines)

    problems = verify(config_file, changed)
    for problem in problems:
        print(f"MISMATCH {problem}")
    print(f"\n{'verified' if not problems and not failed else 'FAILED'}: every recipient holds exactly its tenant's rows "
          f"({time.monotonic() - began:.1f} s)")
    print(f"\nopen the UI on this instance: make ui    (or: {ui_command(workdir)})")
    if problems or failed:
        return 1
    return 0 if share_step(workdir, config_file, changed) else 1

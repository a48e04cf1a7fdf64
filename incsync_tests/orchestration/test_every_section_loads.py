"""A file that sets every key the config reference lists (products, tiers, alerts, audit, maintenance,
recipients_from, every source and destination kind...) is one Dagster loads as a code location, and one
`incsync validate` accepts. The keys to set are read from the config models, so a key added to them and
not to this file fails here until it is."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from incsync.cli.main import main
from incsync.config.docs import SECTIONS
from incsync.config.load import load_config
from incsync.config.model import IncsyncConfig
from incsync.operations.dagster_compat import load_as_code_location
from incsync.orchestration.definitions import build_definitions
from incsync.orchestration.housekeeping import AUDIT_JOB, AUDIT_KEY, AUDIT_SCHEDULE, MAINTENANCE_JOB
from incsync_tests.support.jdbc import PgDatabase, pg_database
from incsync_tests.support.lake import JAN1_EPOCH, order, ts, write_table

ROOT = Path(__file__).resolve().parents[2]
RECIPIENTS_TABLE = """CREATE TABLE public.incsync_recipients (
    id text PRIMARY KEY, id_in_provider_system text NOT NULL, destination text NOT NULL, enabled boolean,
    tags jsonb, products text[], default_full_refresh_min_start_time_epoch bigint)"""
# The variables the file names. Only the source's password is read (for the recipients table; the test server
# trusts local connections); loading the definitions reads none.
ENV = {"APP_DB_PASSWORD": "unused-with-trust-auth", "GLOBEX_DSN": "postgresql://127.0.0.1:5432/globex",
       "INITECH_SIGNING_KEY": "/nonexistent/key.pem", "HOOLI_CATALOG_URI": "sqlite:////nonexistent/catalog.db",
       "UMBRELLA_PASSWORD": "unused", "OPS_WEBHOOK": "http://127.0.0.1:9/hook"}


def every_key(db: PgDatabase) -> dict[str, Any]:
    """The file: each optional key set somewhere, to a value other than its default where that says more."""
    return {
        "sources": [
            {"name": "shop", "vendor": "lake", "path": "./lake", "format": "parquet", "options": {"mergeSchema": "false"},
             "storage_options": {"allow_http": "true"}, "lookback_seconds": 120, "max_concurrent_transfers": 4,
             "max_concurrent_queries_per_transfer": 2},
            {"name": "app_db", "vendor": "postgres", "jdbc_url": db.jdbc_url, "user": db.user,
             "password_env": "APP_DB_PASSWORD", "driver_jar": "/usr/share/java/postgresql.jar",
             "driver_package": "org.postgresql:postgresql:42.7.4", "lookback_seconds": 20, "max_concurrent_transfers": 3,
             "max_concurrent_queries_per_transfer": 2, "fetch_size": 5000, "safe_horizon": False,
             "max_horizon_lag_seconds": 600},
        ],
        "destinations": [
            {"name": "acme_delta", "kind": "delta", "path": "./out/acme", "storage_options": {"allow_http": "true"},
             "max_concurrent_transfers": 2, "target_file_size": 1_048_576, "retention_hours": 24, "change_data_feed": True},
            {"name": "globex_pg", "kind": "postgres", "dsn_env": "GLOBEX_DSN", "schema": "globex",
             "max_concurrent_transfers": 2},
            {"name": "initech_files", "kind": "object_storage", "path": "./out/files", "disable_manifest": False,
             "storage_options": {"allow_http": "true"}, "signing_key_env": "INITECH_SIGNING_KEY",
             "max_concurrent_transfers": 2, "target_file_size": 1_048_576, "retention_hours": 48},
            {"name": "hooli_duckdb", "kind": "duckdb", "path": "./out/hooli.duckdb", "schema": "shared",
             "max_concurrent_transfers": 1, "lock_timeout_seconds": 10},
            {"name": "hooli_iceberg", "kind": "iceberg", "path": "./out/iceberg", "namespace": "hooli", "catalog": "sql",
             "catalog_uri_env": "HOOLI_CATALOG_URI", "storage_options": {"s3.region": "eu-west-1"},
             "max_concurrent_transfers": 2, "retention_hours": 72},
            {"name": "umbrella_maria", "kind": "mariadb", "host": "127.0.0.1", "port": 3306, "user": "incsync",
             "password_env": "UMBRELLA_PASSWORD", "database": "umbrella", "max_concurrent_transfers": 1},
            {"name": "warehouse", "kind": "delta", "path": "./warehouse"},
            {"name": "wayne_pg", "kind": "postgres", "dsn_secret": "vault:wayne_pg", "schema": "wayne"},
            {"name": "stark_maria", "kind": "mariadb", "user": "incsync", "password_secret": "vault:stark_maria",
             "database": "stark"},
        ],
        "models": [
            {"model_name": "orders", "source": "shop", "source_table": "orders",
             "columns": ["id", "organization_id", "status", "amount", "updated_at"], "primary_key": ["id"],
             "last_modified_column": "updated_at", "organization_column": "organization_id", "tenancy": "column",
             "max_transfer_time_window_seconds": 3600, "min_start_time_epoch": JAN1_EPOCH, "frequency": "*/10 * * * *",
             "lookback_seconds": 60, "max_rows_per_batch": 50_000, "max_horizon_lag_seconds": 900,
             "column_types": {"amount": "double"}, "deletes": "hard", "cluster_by": ["status"],
             "max_delete_fraction": 0.2, "integrity_check": "schedule", "integrity_check_cron": "0 4 * * *",
             "integrity_sampling_rate": 0.5, "integrity_repair": True},
            {"model_name": "invoices", "source": "app_db", "source_query": "SELECT * FROM invoices WHERE total > 0",
             "primary_key": ["invoice_no"], "last_modified_column": "modified", "tenancy": "schema",
             "last_modified_timezone": "Europe/Paris", "min_start_time_epoch": JAN1_EPOCH, "deletes": "soft",
             "is_deleted_column": "is_deleted", "integrity_check": "after_transfer"},
        ],
        "recipients": [
            {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta",
             "default_full_refresh_min_start_time_epoch": JAN1_EPOCH + 86_400, "enabled": True,
             "tags": {"tier": "gold"}, "products": ["core"]},
            {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_pg", "products": ["billing"]},
            {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_files", "enabled": False},
            {"id": "umbrella", "id_in_provider_system": "org_5", "destination": "umbrella_maria"},
        ],
        "products": [{"name": "core", "models": ["orders"], "description": "The orders of the shop."},
                     {"name": "billing", "models": ["orders", "invoices"]}],
        "tiers": [{"name": "gold", "frequency": "*/5 * * * *", "models": {"invoices": "0 * * * *"}}],
        "staging_dir": "./staging",
        "staging_storage_options": {"allow_http": "true"},
        "recipients_from": {"source": "app_db", "table": "public.incsync_recipients",
                            "destinations_table": "public.incsync_destinations", "refresh_seconds": 0},
        "recipients_per_run": 100,
        "spark": {"spark.sql.shuffle.partitions": "2"},
        "maintenance": {"frequency": "0 2 * * *", "compact": False},
        "retries": {"attempts": 4, "backoff_seconds": 1.5, "max_backoff_seconds": 20},
        "alerts": {"webhook_url_env": "OPS_WEBHOOK", "blamed": ["provider", "unknown"],
                   "dagster_url": "https://dagster.example.com", "timeout_seconds": 5},
        "audit": {"destination": "warehouse", "frequency": "0 * * * *", "lookback_seconds": 600},
        "sharing": {"listen": "0.0.0.0:8089", "public_url": "https://share.example.com", "token_lifetime_days": 90,
                    "url_lifetime_seconds": 600, "token_store": "./sharing.sqlite", "signing_key_env": "SHARING_KEY",
                    "schema": "shop", "schema_by_source": False, "tables": {"invoices": {"schema": "billing", "table": "invoices"}}},
        "worker": {"auto_start": False, "idle_exit_seconds": 60},
        "vault": {"source": "app_db", "table": "incsync_vault", "key_env": "INCSYNC_TEST_VAULT_KEY", "key_file": "./vault.key"},
        "onboarding": {"kinds": ["postgres", "mariadb"], "link_lifetime_hours": 24, "tables_prefix": "onboard",
                       "admin_token_env": "PROVIDER_TOKEN", "admin_token_secret": "vault:provider_api",
                       "attempts_per_minute": 10},
    }


# The vault's other place, which excludes `source`: a SQLite file.
SQLITE_VAULT = {"vault": {"path": "./vault.sqlite"}}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The section models an annotation holds: ``X | None``, ``list[X]``, a union of kinds, ``Annotated[...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is dict:
        return []
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        args = args[:1]
    return [m for a in args if a is not type(None) for m in _models_in(a)]


def _of_kind(model: type[BaseModel], entry: dict[str, Any]) -> bool:
    """Whether ``entry`` is of ``model`` among a union's kinds (its ``vendor`` or ``kind`` literal)."""
    for key in ("vendor", "kind"):
        field = model.model_fields.get(key)
        if field is not None and typing.get_origin(field.annotation) is typing.Literal:
            return entry.get(key) in typing.get_args(field.annotation)
    return True


def unset_keys(model: type[BaseModel], entries: list[dict[str, Any]], where: str, seen: set[type]) -> list[str]:
    """Every key of ``model`` (and of the sections under it, each kind of a union on its own) that none of
    ``entries`` sets."""
    seen.add(model)
    missing = []
    for name, field in model.model_fields.items():
        key = f"{where}.{field.alias or name}" if where else field.alias or name
        values = [e[field.alias or name] for e in entries if e.get(field.alias or name) is not None]
        if not values:
            missing.append(key)
            continue
        items = [v for value in values for v in (value if isinstance(value, list) else [value]) if isinstance(v, dict)]
        sections = _models_in(field.annotation)
        for section in sections:
            mine = [item for item in items if _of_kind(section, item)]
            inner = f"{key}({section.__name__})" if len(sections) > 1 else key
            missing += unset_keys(section, mine, inner, seen) if mine else [f"{inner}: no entry"]
    return missing


def test_the_file_sets_every_key_the_reference_lists(tmp_path: Path) -> None:
    """The check the definitions test relies on: it finds a key left out, also deep in one kind of a union."""
    doc = every_key(PgDatabase("db", "postgres"))
    seen: set[type] = set()
    assert unset_keys(IncsyncConfig, [doc, SQLITE_VAULT], "", seen) == []
    assert {cls for _, _, classes in SECTIONS for cls in classes} <= seen  # every section of docs/config.md walked
    del doc["alerts"]["timeout_seconds"]
    del doc["destinations"][3]["schema"]
    doc["models"][1].pop("last_modified_timezone")
    doc["destinations"] = [d for d in doc["destinations"] if d["kind"] != "iceberg"]
    assert unset_keys(IncsyncConfig, [doc, SQLITE_VAULT], "", set()) == [
        "destinations(DuckDBDestinationConfig).schema", "destinations(IcebergDestinationConfig): no entry",
        "models.last_modified_timezone", "alerts.timeout_seconds",
    ]


@pytest.fixture
def every_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    write_table(tmp_path / "lake", "orders", [order(1, "org_1", ts(1))])
    with pg_database() as db:
        db.execute(RECIPIENTS_TABLE)
        db.execute("""INSERT INTO public.incsync_recipients VALUES
            ('hooli', 'org_4', 'hooli_duckdb', true, '{"tier": "gold"}', '{billing}', NULL),
            ('hooli_lake', 'org_6', 'hooli_iceberg', false, NULL, NULL, 1704153600)""")
        db.execute("CREATE TABLE public.incsync_destinations (name text, kind text, fields jsonb, secret text)")
        db.execute("""INSERT INTO public.incsync_destinations VALUES
            ('oscorp_pg', 'postgres', '{"schema": "oscorp", "max_concurrent_transfers": 2}', 'vault:oscorp_pg')""")
        file = tmp_path / "incsync.yaml"
        file.write_text(yaml.safe_dump(every_key(db), sort_keys=False))
        yield file


def test_a_file_setting_every_key_loads_in_dagster_and_validates(every_key_file: Path, tmp_path: Path, capsys) -> None:
    file = every_key_file
    doc = yaml.safe_load(file.read_text())
    assert unset_keys(IncsyncConfig, [doc, SQLITE_VAULT], "", set()) == []
    other = tmp_path / "sqlite-vault.yaml"
    other.write_text(yaml.safe_dump({**doc, **SQLITE_VAULT}, sort_keys=False))
    assert load_config(other).vault.path == "./vault.sqlite"
    config = load_config(file)
    assert [r.id for r in config.recipients] == ["acme", "globex", "initech", "umbrella", "hooli", "hooli_lake"]

    defs = build_definitions(file, config=config)
    load_as_code_location(defs)  # what `dagster dev` and the daemon do with them, in this process
    jobs = {j.name for j in defs.resolve_all_job_defs()}
    assert {"orders", "invoices", MAINTENANCE_JOB, AUDIT_JOB} <= jobs
    assert AUDIT_KEY in {s.key for s in defs.resolve_all_asset_specs()}
    schedules = {s.name: s.cron_schedule for s in defs.schedules or []}
    assert {name: schedules.get(name) for name in (AUDIT_SCHEDULE, "incsync_maintenance_schedule")} == {
        AUDIT_SCHEDULE: "0 * * * *", "incsync_maintenance_schedule": "0 2 * * *"}
    assert {"*/10 * * * *", "*/5 * * * *", "0 * * * *", "0 4 * * *"} <= set(schedules.values())

    assert main(["validate", "-c", str(file)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{file}: OK (2 sources, 10 destinations, 2 models, 6 recipients)"

    # Dagster's own command, as an operator runs it before `dagster dev`.
    home = tmp_path / "dagster_home"
    home.mkdir()
    dagster = str(Path(sys.executable).with_name("dagster"))
    env = {**os.environ, "INCSYNC_CONFIG": str(file), "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([dagster, "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "All code locations passed validation." in result.stderr + result.stdout

"""The configuration file: the design's example (docs/design.md#the-file-by-example) loads, and every bad input
gets one exact message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config, parse_config
from incsync.config.sources import DEFAULT_LOOKBACK_SECONDS
from incsync.errors import ConfigError

DESIGN_EXAMPLE = """
sources:
  - name: app_db
    vendor: postgres
    jdbc_url: jdbc:postgresql://127.0.0.1:5432/app
    user: incsync_reader
    password_env: APP_DB_PASSWORD
    lookback_seconds: 30
    max_concurrent_transfers: 10
    max_concurrent_queries_per_transfer: 1
  - name: lake
    vendor: lake
    path: ./data/source
    format: parquet
destinations:
  - {name: acme_delta, kind: delta, path: ./out/acme}
  - {name: globex_pg, kind: postgres, dsn_env: GLOBEX_PG_DSN, schema: globex}
  - {name: initech_files, kind: object_storage, path: ./out/initech}
models:
  - model_name: orders
    source: app_db
    source_table: public.orders
    columns: [id, organization_id, status, amount, updated_at]
    primary_key: [id]
    last_modified_column: updated_at
    organization_column: organization_id
    max_transfer_time_window_seconds: 86400
    min_start_time_epoch: 1704067200
    frequency: "*/15 * * * *"
recipients:
  - id: acme
    id_in_provider_system: org_1
    destination: acme_delta
    default_full_refresh_min_start_time_epoch: 1717200000
    enabled: true
    tags: {tier: gold}
"""


def _base() -> dict:
    return yaml.safe_load(DESIGN_EXAMPLE)


def _problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, path="incsync.yaml")
    return info.value.problems


def test_design_example_loads_and_resolves_relative_paths(tmp_path: Path) -> None:
    file = tmp_path / "incsync.yaml"
    file.write_text(DESIGN_EXAMPLE)
    config = load_config(file)
    assert [s.name for s in config.sources] == ["app_db", "lake"]
    assert config.source("lake").path == str(tmp_path / "data" / "source")
    assert config.destination("acme_delta").path == str(tmp_path / "out" / "acme")
    assert config.destination("globex_pg").schema_name == "globex"
    assert config.recipient("acme").tags == {"tier": "gold"}
    assert config.lookback_seconds(config.model("orders")) == 30


@pytest.mark.parametrize(
    ("vendor", "seconds"), [("postgres", 30), ("mysql", 5), ("mariadb", 5), ("lake", 300)]
)
def test_lookback_defaults_by_vendor(vendor: str, seconds: int) -> None:
    doc = _base()
    source = {"name": "s", "vendor": vendor, "path": "/x"} if vendor == "lake" else {"name": "s", "vendor": vendor, "jdbc_url": "jdbc:x://h/db"}
    doc["sources"] = [source]
    doc["models"][0]["source"] = "s"
    config = parse_config(doc)
    assert config.lookback_seconds(config.model("orders")) == seconds
    assert DEFAULT_LOOKBACK_SECONDS.get(vendor, 300) == seconds


def test_an_unsupported_vendor_is_named_with_the_ones_incsync_reads() -> None:
    doc = _base()
    doc["sources"][0]["vendor"] = "athena"
    assert _problems(doc) == [
        'sources[0]: vendor "athena" is not supported: incsync has no Amazon Athena reader; '
        "use one of lake, postgres, mysql, mariadb"
    ]


def test_model_lookback_overrides_source() -> None:
    doc = _base()
    doc["models"][0]["lookback_seconds"] = 7
    config = parse_config(doc)
    assert config.lookback_seconds(config.model("orders")) == 7


def test_primary_key_not_in_columns() -> None:
    doc = _base()
    doc["models"][0]["primary_key"] = ["idd"]
    assert _problems(doc) == [
        'models[0].primary_key: column "idd" is not in columns [id, organization_id, status, amount, updated_at]; '
        "fix its spelling or add it to columns"
    ]


def test_every_problem_is_reported_at_once_with_file_and_path() -> None:
    doc = _base()
    doc["sources"][0]["pasword_env"] = "X"
    doc["recipients"][0]["id"] = "acme corp"
    doc["recipients"][0]["destination"] = "nowhere"
    doc["destinations"][0].pop("path")
    with pytest.raises(ConfigError) as info:
        parse_config(doc, path="incsync.yaml")
    assert info.value.problems == [
        'sources[0].pasword_env: unknown field; did you mean "password_env"?',
        "destinations[0].path: required field is missing; add it (docs/config.md lists every field)",
        'recipients[0].id: "acme corp" must match ^[A-Za-z0-9_-]+$ (letters, digits, _ and - only)',
    ]
    assert str(info.value).splitlines()[1] == (
        '  incsync.yaml: sources[0].pasword_env: unknown field; did you mean "password_env"?'
    )


def test_a_mistyped_destination_field_is_matched_against_its_own_kind() -> None:
    doc = _base()
    doc["destinations"][0] = {"name": "acme_delta", "kind": "duckdb", "path": "./out/acme.duckdb", "lock_timeout_second": 5}
    assert _problems(doc) == ['destinations[0].lock_timeout_second: unknown field; did you mean "lock_timeout_seconds"?']
    doc["destinations"][0] = {"name": "acme_delta", "kind": "delta", "path": "./out/acme", "schem": "x"}
    assert _problems(doc) == ['destinations[0].schem: unknown field; remove it, or see docs/config.md for the fields']


def test_references_are_checked() -> None:
    doc = _base()
    doc["models"][0]["source"] = "crm"
    doc["recipients"][0]["destination"] = "nowhere"
    assert _problems(doc) == [
        'models[0].source: "crm" is not a configured source; known: [app_db, lake]',
        'recipients[0].destination: "nowhere" is not a configured destination; known: [acme_delta, globex_pg, initech_files]',
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"source_query": "SELECT 1"}, "models[0]: set exactly one of `source_table` and `source_query`"),
        ({"organization_column": None}, "models[0]: set `organization_column` (the tenant column) or `tenancy: schema`"),
        (
            {"max_transfer_time_window_seconds": 5000},
            "models[0].max_transfer_time_window_seconds: 5000 seconds cannot form a window grid; use whole minutes "
            "dividing an hour, whole hours dividing a day, or 86400 (e.g. 900, 3600, 21600, 86400)",
        ),
        ({"frequency": "every minute"}, 'models[0].frequency: "every minute" is not a cron expression (e.g. "*/15 * * * *")'),
        ({"last_modified_timezone": "Mars/Olympus"}, 'models[0].last_modified_timezone: "Mars/Olympus" is not an IANA zone name'),
    ],
    ids=["table-and-query", "no-tenant", "window-size", "cron", "zone"],
)
def test_model_problems(change: dict, expected: str) -> None:
    doc = _base()
    doc["models"][0].update(change)
    assert _problems(doc) == [expected]


def test_secret_in_jdbc_url_is_refused() -> None:
    doc = _base()
    doc["sources"][0]["jdbc_url"] = "jdbc:postgresql://h/app?user=x&password=hunter2"
    problems = _problems(doc)
    assert problems == ["sources[0].jdbc_url: the JDBC URL must not carry a password: put its variable's name in `password_env`"]
    assert "hunter2" not in " ".join(problems)


def test_invalid_tags_and_duplicates() -> None:
    doc = _base()
    doc["recipients"][0]["tags"] = {"tier": "gold plated"}
    doc["recipients"].append(dict(doc["recipients"][0], tags={}))
    assert _problems(doc) == [
        'recipients[0].tags: tag tier=gold plated is invalid: keys and values must match ^[A-Za-z0-9_-]+$',
    ]
    doc["recipients"][0]["tags"] = {}
    assert _problems(doc) == ['recipients[1]: duplicate name "acme"; names must be unique']


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.problems == ["file not found; create it or point INCSYNC_CONFIG at it"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.problems[0].startswith("not valid YAML:")


def test_a_delta_or_postgres_destination_serves_one_recipient() -> None:
    doc = _base()
    doc["recipients"].append({"id": "globex", "id_in_provider_system": "org_2", "destination": "acme_delta"})
    assert _problems(doc) == [
        'destinations[0]: "acme_delta" is used by recipients acme, globex; a delta destination holds one '
        "recipient's copy, so give each recipient its own (object_storage may be shared)"
    ]
    doc["recipients"][1]["destination"] = "initech_files"
    doc["recipients"].append({"id": "umbrella", "id_in_provider_system": "org_3", "destination": "initech_files"})
    assert parse_config(doc).recipient("umbrella").destination == "initech_files"

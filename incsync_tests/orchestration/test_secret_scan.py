"""Secret scans: a destination's DSN, holding a distinctive password, lives only in the vault. Real transfers
to PostgreSQL through the CLI and a Dagster instance (one delivered, one failing on its destination), the audit
log written, validate --connect run; neither password is in any log line or output, any Dagster event, run tag
or run config, any file of the instance or the run, any audit row or destination row, nor in plaintext in the
vault's table."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._serdes import serialize_value

from incsync.cli.main import main
from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync.operations.audit import TABLES, owner, table_model
from incsync.secrets.keys import new_key
from incsync.secrets.stores import VaultStore
from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.lake import lake_config, order, ts, write_table

PASSWORD = "Zq9-scan-distinctive-Pw-4417"
FAILING_PASSWORD = "Zq9-scan-failing-Pw-9031"
SECRETS = (PASSWORD.encode(), FAILING_PASSWORD.encode())


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def _config(tmp_path: Path) -> Path:
    file = lake_config(
        tmp_path,
        recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_pg"},
                    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_pg"}],
        destinations=[{"name": "acme_pg", "kind": "postgres", "dsn_secret": "vault:acme_pg", "schema": "acme"},
                      {"name": "globex_pg", "kind": "postgres", "dsn_secret": "vault:globex_pg", "schema": "globex"},
                      {"name": "warehouse", "kind": "delta", "path": "./warehouse"}],
    )
    doc = yaml.safe_load(file.read_text())
    doc["vault"] = {"path": "./vault.sqlite"}
    doc["audit"] = {"destination": "warehouse"}
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


def test_a_vault_password_appears_in_no_log_event_tag_config_audit_row_or_table(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)),
                                             order(3, "org_2", ts(1, 3))])
    file = _config(tmp_path)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("INCSYNC_VAULT_KEY", new_key())
    caplog.set_level(logging.DEBUG)
    with postgres_database() as dsn:
        user_at, database = dsn.removeprefix("postgresql://").split("/", 1)[0], dsn.rsplit("/", 1)[1]
        user, host = user_at.split("@")
        vault = VaultStore(load_config(file).destination("acme_pg").dsn_secret.vault)
        vault.set("acme_pg", f"postgresql://{user}:{PASSWORD}@{host}/{database}")
        vault.set("globex_pg", f"postgresql://{user}:{FAILING_PASSWORD}@{host}/{database}_missing")

        assert main(["transfer", "orders", "--window", "2024-01-01", "-c", str(file)]) == 1  # globex's fails alone
        assert main(["audit", "-c", str(file)]) == 0
        assert main(["validate", "--connect", "-c", str(file)]) == 1
        config = load_config(file)
        destination = build_destination(config.destination("acme_pg"))
        delivered = destination.read_rows(model=config.models[0], recipient=config.recipient("acme")).to_pylist()
        assert [(r["id"], r["organization_id"]) for r in delivered] == [(1, "org_1"), (2, "org_1")]
        import psycopg

        with psycopg.connect(dsn) as conn:
            stored = [row for (table,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'acme'").fetchall()
                for row in conn.execute(f'SELECT * FROM acme."{table}"').fetchall()]
    output = capfd.readouterr()
    assert "vault entry globex_pg" in output.err  # validate --connect named the failing one

    instance = dg.DagsterInstance.get()
    runs = instance.get_runs()
    assert sorted(r.status.value for r in runs) == ["FAILURE", "SUCCESS"]  # one run for both (globex failed), the audit
    events = [serialize_value(event) for run in runs for event in instance.all_logs(run.run_id)]
    # Materializations, expanded from their compact text (a byte scan of the files cannot see into it); on SQLite
    # they are stored in the index shard only, not in the runs' logs.
    events += [serialize_value(r.event_log_entry) for key in instance.get_asset_keys()
               for r in instance.fetch_materializations(key, limit=10_000).records]
    assert any("acme_pg" in e for e in events)  # the scan reads what the runs recorded
    audit_rows = [row for name in TABLES for row in build_destination(config.destination("warehouse")).current_rows(
        model=table_model(name), recipient=owner(config)).to_pylist()]
    assert {r.get("recipient") for r in audit_rows} >= {"acme", "globex"}
    assert any("acme_pg" in str(row) for row in audit_rows)
    assert _files_holding(tmp_path, b"acme_pg")  # the byte scan finds what the instance's files hold
    for secret in SECRETS:
        text = secret.decode()
        assert text not in output.out + output.err
        assert [r.getMessage() for r in caplog.records if text in r.getMessage()] == []
        assert [e for e in events if text in e] == []
        assert [r.run_id for r in runs if text in str(r.tags) or text in str(r.run_config)] == []
        assert [row for row in audit_rows if text in str(row)] == []
        assert [row for row in stored if text in str(row)] == []
        assert _files_holding(tmp_path, secret) == []  # the instance's storage and logs, the vault's table, the warehouse

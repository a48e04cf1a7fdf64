"""PostgreSQL and MariaDB destinations open their secret from the vault where they connect, and never show it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync.errors import ConfigError, PublishError
from incsync.secrets.keys import new_key
from incsync.secrets.stores import VaultStore
from incsync_tests.support.destinations import mariadb_admin, postgres_database
from incsync_tests.support.lake import lake_config

PASSWORD = "Zq9-maria-distinctive-pw"


def _config(tmp_path: Path, destination: dict) -> Path:
    path = lake_config(tmp_path, destinations=[{"name": "acme_delta", **destination}])
    doc = yaml.safe_load(path.read_text())
    doc["vault"] = {"path": "./vault.sqlite"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_postgres_destination_connects_with_the_dsn_in_the_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INCSYNC_VAULT_KEY", new_key())
    config = load_config(_config(tmp_path, {"kind": "postgres", "dsn_secret": "vault:acme_pg", "schema": "acme"}))
    destination = config.destination("acme_delta")
    with postgres_database() as dsn:
        store = VaultStore(destination.dsn_secret.vault)
        store.set("other", dsn)
        with pytest.raises(ConfigError) as missing:
            build_destination(destination).check()
        assert missing.value.problems == [
            f"destinations[acme_delta].dsn_secret: vault entry acme_pg does not exist in {tmp_path / 'vault.sqlite'}; store "
            "it with `incsync secrets set acme_pg` (the value is read from standard input)"]
        store.set("acme_pg", "not a dsn Zq9")
        with pytest.raises(ConfigError) as wrong:
            build_destination(destination).check()
        assert wrong.value.problems == [
            "destinations[acme_delta].dsn_secret: vault entry acme_pg is not a PostgreSQL connection string "
            "(postgresql://user@host:port/dbname or key=value pairs)"]
        store.set("acme_pg", dsn)
        build_destination(destination).check()
        assert build_destination(destination).read_state(model=config.models[0], recipient=config.recipients[0]).last_transfer is None


def test_a_mariadb_destination_logs_in_with_the_password_in_the_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = mariadb_admin()
    user, database = f"incsync_v_{uuid.uuid4().hex[:8]}", f"incsync_t_{uuid.uuid4().hex[:10]}"
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'")
            cur.execute(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{PASSWORD}'")
            cur.execute(f"GRANT ALL ON `{database}`.* TO '{user}'@'%'")
            cur.execute(f"GRANT ALL ON `{database}`.* TO '{user}'@'localhost'")
        monkeypatch.setenv("INCSYNC_VAULT_KEY", new_key())
        spec = {"kind": "mariadb", "user": user, "database": database, "password_secret": "vault:acme_maria"}
        destination = load_config(_config(tmp_path, spec)).destination("acme_delta")
        store = VaultStore(destination.password_secret.vault)
        store.set("acme_maria", "wrong-" + PASSWORD)
        with pytest.raises(PublishError) as refused:
            build_destination(destination).check()
        assert f"cannot connect to MariaDB at 127.0.0.1:3306 as {user}" in str(refused.value)
        assert "Access denied" in str(refused.value) and PASSWORD not in str(refused.value)
        store.set("acme_maria", PASSWORD)
        build_destination(destination).check()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'localhost'")
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin.close()

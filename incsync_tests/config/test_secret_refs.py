"""Secrets by reference in the file: `dsn_secret` / `password_secret` name a vault entry or a variable, never the
secret; a vault reference needs a `vault:` section and is bound to it when the file is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.config.secrets import SecretRef
from incsync.errors import ConfigError
from incsync_tests.support.lake import lake_config

DSN = "postgresql://app:Zq9-pasted-secret@db.example.com/app"


def _file(tmp_path: Path, destination: dict, vault: dict | None = None) -> Path:
    path = lake_config(tmp_path, destinations=[{"name": "acme_delta", **destination}])
    doc = yaml.safe_load(path.read_text())
    if vault is not None:
        doc["vault"] = vault
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def test_a_vault_reference_is_bound_to_the_vault_of_the_file(tmp_path: Path) -> None:
    pg = {"kind": "postgres", "dsn_secret": "vault:acme_pg", "schema": "acme"}
    config = load_config(_file(tmp_path, pg, vault={"path": "./secrets/vault.db", "key_file": "./vault.key"}))
    ref = config.destination("acme_delta").dsn_secret
    assert (ref, str(ref)) == (SecretRef("vault", "acme_pg"), "vault:acme_pg")
    assert ref.vault is not None
    assert (ref.vault.path, ref.vault.key_file, ref.vault.key_env) == (
        str(tmp_path / "secrets" / "vault.db"), str(tmp_path / "vault.key"), "INCSYNC_VAULT_KEY")
    assert config.destination("acme_delta").described() == "schema acme (DSN in vault entry acme_pg)"
    env = load_config(_file(tmp_path, {"kind": "mariadb", "user": "u", "database": "d", "password_secret": "env:ACME_PW"}))
    assert env.destination("acme_delta").password_ref == SecretRef("env", "ACME_PW")
    assert env.destination("acme_delta").required_variables() == [("password_secret", "ACME_PW", "...")]


def test_a_secret_pasted_where_its_reference_belongs_is_refused_without_repeating_it(tmp_path: Path) -> None:
    problems = _problems(_file(tmp_path, {"kind": "postgres", "dsn_secret": DSN, "schema": "acme"}, vault={"path": "v.db"}))
    assert problems == ["destinations[0].dsn_secret: must be a reference, `vault:<entry>` (an entry of the vault) or "
                        "`env:<VARIABLE>` (an environment variable's name); never the secret itself (docs/secrets.md)"]
    assert "Zq9" not in "\n".join(problems)


def test_the_dsn_comes_from_exactly_one_place_and_the_vault_must_be_configured(tmp_path: Path) -> None:
    assert _problems(_file(tmp_path, {"kind": "postgres", "schema": "acme"})) == [
        "destinations[0]: set exactly one of `dsn_env` (a variable's name) and `dsn_secret` (`vault:<entry>` (an entry "
        "of the vault) or `env:<VARIABLE>` (an environment variable's name)) for the connection string"]
    assert _problems(_file(tmp_path, {"kind": "postgres", "schema": "acme", "dsn_secret": "vault:acme_pg"})) == [
        "destinations[0].dsn_secret: vault:acme_pg names the vault, but the file has no `vault:` section; add one saying "
        "where its table is (docs/secrets.md)"]
    both = {"kind": "mariadb", "user": "u", "database": "d", "password_env": "A", "password_secret": "env:B"}
    assert _problems(_file(tmp_path, both)) == ["destinations[0]: set at most one of `password_env` and `password_secret`"]


def test_the_vault_section_names_one_place_and_a_postgres_source(tmp_path: Path) -> None:
    pg = {"kind": "postgres", "dsn_secret": "vault:acme_pg", "schema": "acme"}
    assert _problems(_file(tmp_path, pg, vault={"path": "v.db", "source": "lake"})) == [
        "vault: set exactly one of `source` (a postgres source) and `path` (a SQLite file)"]
    assert _problems(_file(tmp_path, pg, vault={"source": "lake"})) == [
        'vault.source: "lake" must name a source of vendor postgres (known: lake)']
    assert _problems(_file(tmp_path, pg, vault={"path": "v.db", "table": "s.t"})) == [
        'vault: table "s.t" of a SQLite file takes no schema: name the table alone']

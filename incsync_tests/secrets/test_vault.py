"""The vault's table, in a SQLite file and in PostgreSQL through a source: entries set, listed (never their
values), opened by reference, re-sealed by a key rotation while older keys still open them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from incsync.config.secrets import SecretRef, VaultPlace
from incsync.config.sources import JdbcSourceConfig
from incsync.errors import ConfigError
from incsync.secrets import stores
from incsync.secrets.errors import VaultError
from incsync.secrets.keys import KeyRing, new_key
from incsync.secrets.stores import VaultStore, open_secret
from incsync.secrets.vault import VaultTable
from incsync_tests.support.jdbc import pg_database

PASSWORD = "Zq9-vault-distinctive-pw"
KEY_ENV = "INCSYNC_TEST_VAULT_KEY"


@contextmanager
def vault_place(kind: str, tmp_path: Path) -> Iterator[VaultPlace]:
    if kind == "sqlite":
        yield VaultPlace(table="incsync_vault", source=None, path=str(tmp_path / "vault.sqlite"), key_env=KEY_ENV, key_file=None)
        return
    with pg_database() as db:
        db.execute("CREATE SCHEMA incsync")
        source = JdbcSourceConfig(name="app", vendor="postgres", jdbc_url=db.jdbc_url, user=db.user)
        yield VaultPlace(table="incsync.vault", source=source, path=None, key_env=KEY_ENV, key_file=None)


def _raw_rows(place: VaultPlace) -> list[tuple]:
    table = VaultTable(place)
    rows, _ = table._run("SELECT * FROM {table}")  # noqa: SLF001 - the table as stored, to look for plaintext
    return rows


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_entries_are_set_listed_opened_and_rotated_to_a_new_key(kind: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = new_key(), new_key()
    monkeypatch.setenv(KEY_ENV, old)
    with vault_place(kind, tmp_path) as place:
        store = VaultStore(place)
        store.set("acme_pg", PASSWORD)
        store.set("globex_pg", "globex-" + PASSWORD)
        old_id = KeyRing.parse(old, where="-").primary_id
        assert [(e.name, e.key_id) for e in store.entries()] == [("acme_pg", old_id), ("globex_pg", old_id)]
        assert all(PASSWORD not in str(cell) for row in _raw_rows(place) for cell in row)
        ref = SecretRef("vault", "acme_pg", vault=place)
        assert open_secret(ref, used_by="destinations[acme].dsn_secret").get_secret_value() == PASSWORD

        monkeypatch.setenv(KEY_ENV, f"{new},{old}")  # step 2: the new key seals, the old still opens
        assert open_secret(ref, used_by="destinations[acme].dsn_secret").get_secret_value() == PASSWORD
        changed_at = {e.name: e.updated_at for e in store.entries()}
        assert store.rotate() == (2, 0)
        assert store.rotate() == (0, 2)
        new_id = KeyRing.parse(new, where="-").primary_id
        assert [(e.name, e.key_id, e.updated_at) for e in store.entries()] == [
            ("acme_pg", new_id, changed_at["acme_pg"]), ("globex_pg", new_id, changed_at["globex_pg"])]  # values unchanged

        monkeypatch.setenv(KEY_ENV, new)  # step 4: the old key retired
        stores.forget(place)
        assert open_secret(ref, used_by="x").get_secret_value() == PASSWORD
        assert open_secret(replace(ref, name="globex_pg"), used_by="x").get_secret_value() == "globex-" + PASSWORD
        assert all(PASSWORD not in str(cell) for row in _raw_rows(place) for cell in row)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_rotation_never_overwrites_a_value_set_meanwhile(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, new_key())
    with vault_place(kind, tmp_path) as place:
        store = VaultStore(place)
        store.set("acme_pg", "first")
        [stale] = VaultTable(place).sealed().values()
        store.set("acme_pg", "second")
        assert VaultTable(place).replace("acme_pg", stale, stale, key_id="x") is False
        assert open_secret(SecretRef("vault", "acme_pg", vault=place), used_by="x").get_secret_value() == "second"


def test_a_missing_entry_key_or_table_is_named_with_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    place = VaultPlace(table="incsync_vault", source=None, path=str(tmp_path / "vault.sqlite"), key_env=KEY_ENV, key_file=None)
    ref = SecretRef("vault", "acme_pg", vault=place)
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(VaultError) as no_file:
        open_secret(ref, used_by="destinations[acme].dsn_secret")
    assert no_file.value.problems[0].startswith(f"vault: cannot read {tmp_path / 'vault.sqlite'}: unable to open database file")
    with pytest.raises(VaultError) as no_key:
        VaultStore(place).set("acme_pg", PASSWORD)
    assert no_key.value.problems == [f"vault.key_env: variable {KEY_ENV} is not set; export the vault's keys in it, "
                                     "newest first (docs/secrets.md)"]
    monkeypatch.setenv(KEY_ENV, new_key())
    VaultStore(place).set("globex_pg", PASSWORD)
    with pytest.raises(VaultError) as missing:
        open_secret(ref, used_by="destinations[acme].dsn_secret")
    assert missing.value.problems == [
        f"destinations[acme].dsn_secret: vault entry acme_pg does not exist in {tmp_path / 'vault.sqlite'}; store it "
        "with `incsync secrets set acme_pg` (the value is read from standard input)"]


def test_an_entry_set_by_another_process_is_seen_without_waiting_for_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, new_key())
    monkeypatch.setattr(stores, "MISS_RETRY_SECONDS", 0.0)
    place = VaultPlace(table="incsync_vault", source=None, path=str(tmp_path / "vault.sqlite"), key_env=KEY_ENV, key_file=None)
    VaultStore(place).set("acme_pg", "a")
    assert open_secret(SecretRef("vault", "acme_pg", vault=place), used_by="x").get_secret_value() == "a"
    keys = KeyRing.load(place)
    VaultTable(place).put("globex_pg", keys.seal("globex_pg", "g"), key_id=keys.primary_id)  # not through this store
    assert open_secret(SecretRef("vault", "globex_pg", vault=place), used_by="x").get_secret_value() == "g"


def test_the_environment_store_names_the_setting_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INCSYNC_TEST_DSN", "postgresql://x@h/db")
    assert open_secret(SecretRef("env", "INCSYNC_TEST_DSN"), used_by="d").get_secret_value() == "postgresql://x@h/db"
    monkeypatch.delenv("INCSYNC_TEST_DSN")
    with pytest.raises(ConfigError) as info:
        open_secret(SecretRef("env", "INCSYNC_TEST_DSN"), used_by="destinations[acme].dsn_secret", what="the DSN")
    assert info.value.problems == ["destinations[acme].dsn_secret: variable INCSYNC_TEST_DSN is not set; export the DSN in it"]


def test_a_key_file_holds_the_keys_instead_of_the_variable(tmp_path: Path) -> None:
    key_file = tmp_path / "vault.key"
    key_file.write_text(new_key() + "\n")
    place = VaultPlace(table="incsync_vault", source=None, path=str(tmp_path / "v.sqlite"), key_env=KEY_ENV,
                       key_file=str(key_file))
    VaultStore(place).set("acme_pg", PASSWORD)
    assert open_secret(SecretRef("vault", "acme_pg", vault=place), used_by="x").get_secret_value() == PASSWORD
    key_file.unlink()
    stores.forget(place)
    with pytest.raises(VaultError, match=rf"vault.key_file: cannot read {key_file} \(No such file or directory\)"):
        open_secret(SecretRef("vault", "acme_pg", vault=place), used_by="x")

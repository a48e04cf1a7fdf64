"""`incsync secrets`: values in through standard input or a prompt only, listed without them, re-sealed under a
new key while the old one still opens them."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from incsync.cli.main import main
from incsync.config.load import load_config
from incsync.secrets.keys import KeyRing, new_key
from incsync.secrets.stores import open_secret
from incsync_tests.support.lake import lake_config

PASSWORD = "Zq9-cli-distinctive-pw"


class _Stdin(io.StringIO):
    def __init__(self, text: str, *, tty: bool = False):
        super().__init__(text)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def vault_file(tmp_path: Path) -> Path:
    file = lake_config(tmp_path, destinations=[{"name": "acme_delta", "kind": "postgres", "dsn_secret": "vault:acme_pg",
                                                "schema": "acme"}])
    doc = yaml.safe_load(file.read_text())
    doc["vault"] = {"path": "./vault.sqlite", "key_env": "INCSYNC_TEST_VAULT_KEY"}
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


def _set(file: Path, name: str, stdin: _Stdin, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.stdin", stdin)
    return main(["secrets", "set", name, "-c", str(file)])


def _opened(file: Path) -> str:
    return open_secret(load_config(file).destination("acme_delta").dsn_secret, used_by="x").get_secret_value()


def test_set_reads_standard_input_and_list_never_shows_a_value(vault_file: Path, tmp_path: Path, monkeypatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    key = new_key()
    monkeypatch.setenv("INCSYNC_TEST_VAULT_KEY", key)
    kid = KeyRing.parse(key, where="-").primary_id
    assert _set(vault_file, "acme_pg", _Stdin(PASSWORD + "\n"), monkeypatch) == 0
    assert capsys.readouterr().out == f"vault entry acme_pg set, sealed under key {kid}, in {tmp_path / 'vault.sqlite'}\n"
    assert _opened(vault_file) == PASSWORD  # the final newline is not part of it

    assert main(["secrets", "list", "--json", "-c", str(vault_file)]) == 0
    out = capsys.readouterr().out
    [row] = json.loads(out)
    assert (row["name"], row["key"], row["sealed_under"]) == ("acme_pg", kid, "newest key")
    assert PASSWORD not in out
    with sqlite3.connect(tmp_path / "vault.sqlite") as db:
        assert all(PASSWORD not in str(cell) for r in db.execute("SELECT * FROM incsync_vault") for cell in r)

    assert main(["secrets", "set", "acme_pg", PASSWORD, "-c", str(vault_file)]) == 2  # never from the command line
    err = capsys.readouterr().err
    assert err.startswith("error: incsync secrets set takes no value on the command line") and PASSWORD not in err
    assert _set(vault_file, "acme_pg", _Stdin(""), monkeypatch) == 2
    assert "no value for vault entry acme_pg" in capsys.readouterr().err


def test_set_prompts_twice_on_a_terminal(vault_file: Path, monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("INCSYNC_TEST_VAULT_KEY", new_key())
    typed = iter([PASSWORD, PASSWORD + "x"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))
    assert _set(vault_file, "acme_pg", _Stdin("", tty=True), monkeypatch) == 2
    assert capsys.readouterr().err == ("error: the two values typed for vault entry acme_pg differ; nothing was "
                                       "stored\n")
    typed = iter([PASSWORD, PASSWORD])
    assert _set(vault_file, "acme_pg", _Stdin("", tty=True), monkeypatch) == 0
    assert _opened(vault_file) == PASSWORD


def test_rotate_key_reseals_under_the_new_key_while_the_old_still_opens(vault_file: Path, monkeypatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    old, new = new_key(), new_key()
    monkeypatch.setenv("INCSYNC_TEST_VAULT_KEY", old)
    assert _set(vault_file, "acme_pg", _Stdin(PASSWORD), monkeypatch) == 0
    assert _set(vault_file, "globex_pg", _Stdin("g"), monkeypatch) == 0
    monkeypatch.setenv("INCSYNC_TEST_VAULT_KEY", f"{new},{old}")
    assert _opened(vault_file) == PASSWORD  # before the rotation: the old key opens it
    capsys.readouterr()
    assert main(["secrets", "list", "-c", str(vault_file)]) == 0
    assert [line.split()[2:4] for line in capsys.readouterr().out.splitlines()[1:]] == [["older", "key"]] * 2
    assert main(["secrets", "rotate-key", "-c", str(vault_file)]) == 0
    new_id = KeyRing.parse(new, where="-").primary_id
    assert capsys.readouterr().out.splitlines() == [
        f"2 vault entries re-sealed under key {new_id}; 0 already were",
        "every entry is now sealed under the newest key: remove the older ones from $INCSYNC_TEST_VAULT_KEY wherever "
        "transfers run"]
    monkeypatch.setenv("INCSYNC_TEST_VAULT_KEY", new)
    from incsync.secrets import stores

    stores.forget(load_config(vault_file).destination("acme_delta").dsn_secret.vault)
    assert _opened(vault_file) == PASSWORD
    assert main(["secrets", "delete", "globex_pg", "-c", str(vault_file)]) == 0
    assert main(["secrets", "delete", "globex_pg", "-c", str(vault_file)]) == 2


def test_new_key_prints_a_key_the_vault_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["secrets", "new-key"]) == 0
    printed = capsys.readouterr().out.strip()
    assert len(KeyRing.parse(printed, where="-").keys[0]) == 32

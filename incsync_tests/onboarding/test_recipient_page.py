"""The recipient's page: a form generated from the destination models, a connection test that names the problem,
a save that writes the destinations row and the vault entry (never the secret elsewhere), the status afterwards;
and each refusal: tampered, expired, revoked and reused links, another recipient's id, a missing or foreign CSRF
token, a cross-origin post, link guessing over the limit."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from pathlib import Path
from urllib.parse import urlencode

import pytest

from incsync.cli.main import main
from incsync.onboarding.page import NOT_VALID, REFUSED, TOO_MANY
from incsync_tests.onboarding.conftest import Served, request

PASSWORD = "Pw-onboard-7731-distinctive"


def _link(served: Served, capsys: pytest.CaptureFixture[str], recipient: str = "globex") -> str:
    file = str(served.setup.file)
    if not served.setup.rows(f"SELECT 1 FROM incsync_recipients WHERE id = '{recipient}'"):
        assert main(["onboard", "create", recipient, "--id-in-provider-system", "org_2", "-c", file]) == 0
    assert main(["onboard", "link", recipient, "-c", file]) == 0
    return capsys.readouterr().out.splitlines()[-1]


class Browser:
    """One browser session on a link: its cookie, the last form's CSRF token, posts from the server's origin."""

    def __init__(self, served: Served, url: str) -> None:
        self.served, self.url, self.cookie, self.csrf = served, url, "", ""

    def open(self, query: str = "") -> tuple[int, str]:
        status, headers, body = request(self.url + query, headers={"Cookie": self.cookie} if self.cookie else {})
        found = re.search(r"incsync_onboard_session=([^;]+)", headers.get("set-cookie", ""))
        if found:
            self.cookie = f"incsync_onboard_session={found.group(1)}"
        token = re.search(r'name="csrf" value="([^"]+)"', body.decode())
        self.csrf = token.group(1) if token else self.csrf
        return status, body.decode()

    def post(self, fields: dict[str, str], *, origin: str | None = "same", **override: str) -> tuple[int, str, dict[str, str]]:
        form = {"csrf": self.csrf, "recipient": "globex", "kind": "postgres", **fields, **override}
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": self.cookie}
        if origin is not None:
            headers["Origin"] = self.served.url if origin == "same" else origin
        status, answer, body = request(self.url, method="POST", body=urlencode(form).encode(), headers=headers)
        return status, body.decode(), answer


def _dsn(served: Served, user: str | None = None) -> str:
    return f"postgresql://{user or served.setup.db.user}:{PASSWORD}@127.0.0.1:5432/{served.setup.db.name}"


def test_the_form_is_generated_from_the_kind_model(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    browser = Browser(served, _link(served, capsys))
    status, page = browser.open()
    assert status == 200
    assert '<label for="f_schema">schema</label><small>Target schema, created when missing.</small>' in page
    assert ('<input id="f_dsn_secret" name="dsn_secret" type="password" autocomplete="new-password" value="">' in page)
    assert "dsn_env" not in page and "max_concurrent_transfers" not in page  # the provider's settings
    assert '<a href="?kind=mariadb">mariadb</a>' in page
    status, page = browser.open("?kind=mariadb")
    assert '<label for="f_host">host</label>' in page and 'value="3306"' in page and 'name="password_secret"' in page
    _, headers, _ = request(browser.url)
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/onboard/" in cookie
    [(key,)] = served.setup.rows("SELECT value FROM incsync_onboarding_keys WHERE name = 'csrf'")
    assert len(bytes(key)) == 32  # one CSRF key for every server process on these tables
    assert headers["content-security-policy"].startswith("default-src 'none'") and headers["referrer-policy"] == "same-origin"


def test_a_wrong_connection_is_named_then_the_fixed_one_is_saved(served: Served, capsys: pytest.CaptureFixture[str],
                                                                 caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG)
    browser = Browser(served, _link(served, capsys))
    browser.open()
    status, page, _ = browser.post({"schema": "globex", "dsn_secret": _dsn(served, "nobody_x"), "action": "test"})
    assert status == 400
    assert 'Connection failed: destination globex: cannot connect to PostgreSQL with the DSN in vault entry ' \
           'onboard.globex: ' in page and 'role &quot;nobody_x&quot; does not exist. To fix: check the user and password: ' \
           "the user must exist on your server and may log in from incsync&#x27;s address." in page
    assert 'value="globex"' in page and PASSWORD not in page  # the schema typed comes back; the secret never

    served.setup.db.execute("CREATE SCHEMA taken; CREATE TABLE taken.t (a int)")
    status, page, _ = browser.post({"schema": "taken", "dsn_secret": _dsn(served), "action": "test"})
    assert status == 400, page
    assert re.findall(r'<div class="bad" role="status">(.*?)</div>', page) == [
        "Connection failed: schema &quot;taken&quot; already holds tables incsync did not write (t); choose a new or empty "
        "schema (incsync creates it)"]

    status, page, _ = browser.post({"schema": "globex", "dsn_secret": _dsn(served), "action": "test"})
    assert status == 200 and "Connection works" in page
    assert served.setup.rows("SELECT count(*) FROM incsync_destinations") == [(0,)]  # a test stores nothing
    status, _, headers = browser.post({"schema": "globex", "dsn_secret": _dsn(served), "action": "save"})
    assert status == 303 and headers["location"] == browser.url

    assert served.setup.rows("SELECT name, kind, fields, secret FROM incsync_destinations") == [
        ("globex", "postgres", {"schema": "globex"}, "vault:onboard.globex")]
    assert served.setup.rows("SELECT destination, enabled FROM incsync_recipients") == [("globex", True)]
    status, page = browser.open()
    assert status == 200 and "Your postgres destination is connected" in page
    assert "No model has been transferred yet" not in page and "<td>orders</td><td>-</td>" in page

    vault = sqlite3.connect(served.setup.file.parent / "vault.sqlite").execute("SELECT name, sealed FROM incsync_vault")
    assert [name for name, sealed in vault.fetchall() if PASSWORD not in sealed] == ["onboard.globex"]
    assert main(["onboard", "audit", "--json", "-c", str(served.setup.file)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[-1]["action"] == "connect" and rows[-1]["actor"] == "recipient:globex"
    assert rows[-1]["detail"] == {"link": rows[-1]["detail"]["link"], "destination": "globex", "kind": "postgres",
                                  "fields": {"schema": "globex"}, "secret": "vault:onboard.globex"}
    tables = served.setup.rows("SELECT string_agg(t::text, ' ') FROM incsync_onboarding_audit t")
    assert PASSWORD not in str(tables) and PASSWORD not in caplog.text
    assert browser.url.rsplit("/", 1)[1] not in caplog.text  # the token is logged as /onboard/...

    status, page, _ = browser.post({"schema": "other", "dsn_secret": _dsn(served), "action": "save"})  # reused
    assert status == 403 and REFUSED in page and "globex" not in page


def test_refused_links_and_posts_say_nothing_of_the_recipient(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    url = _link(served, capsys)
    token = url.rsplit("/", 1)[1]
    tampered = url[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (tampered, url + "x", url.rsplit("/", 1)[0] + "/guess"):
        status, _, body = request(bad)
        assert (status, body.decode().count(NOT_VALID)) == (404, 1) and "globex" not in body.decode()

    browser = Browser(served, url)
    browser.open()
    fields = {"schema": "globex", "dsn_secret": _dsn(served), "action": "save"}
    for case in ({"recipient": "acme"}, {"csrf": "0" * 64}, {"csrf": ""}, {"kind": "delta"}):
        status, page, _ = browser.post(fields, **case)
        assert (status, REFUSED in page, "globex" in page) == (403, True, False), case
    assert browser.post(fields, origin="http://evil.example")[0] == 403
    assert browser.post(fields, origin=None)[0] == 403  # neither Origin nor Referer
    other = Browser(served, url)
    other.open()
    other.csrf = browser.csrf  # a token of another session
    assert other.post(fields)[0] == 403
    assert served.setup.rows("SELECT count(*) FROM incsync_destinations") == [(0,)]

    served.setup.db.execute("UPDATE incsync_onboarding_links SET expires_at = now() - interval '1 second'")
    assert request(url)[0] == 404
    url = _link(served, capsys)
    assert main(["onboard", "revoke", "globex", "-c", str(served.setup.file)]) == 0
    status, _, body = request(url)
    assert status == 404 and NOT_VALID in body.decode()


@pytest.fixture
def limited(setup, monkeypatch):  # noqa: ANN001, ANN201 - pytest fixtures
    import yaml

    doc = yaml.safe_load(setup.file.read_text())
    doc["onboarding"]["attempts_per_minute"] = 3
    setup.file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return setup


def test_link_guessing_is_limited_per_client(limited, served: Served, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    url = _link(served, capsys)
    guesses = [request(f"{served.url}/onboard/incsync_ol_guess{i}")[0] for i in range(3)]
    assert guesses == [404, 404, 404]
    status, _, body = request(url)  # even the right link, from this client, until a minute has passed
    assert status == 429 and TOO_MANY in body.decode()


def test_the_status_names_a_failure_blamed_on_the_recipient_with_its_fix(
        spark, served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.config.load import load_config
    from incsync.config.secrets import vault_place
    from incsync.secrets.stores import VaultStore
    from incsync_tests.support.lake import order, ts, write_table

    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    write_table(tmp_path / "src", "orders", [order(1, "org_2", ts(1, 1)), order(2, "org_2", ts(1, 2))])
    browser = Browser(served, _link(served, capsys))
    browser.open()
    assert browser.post({"schema": "globex", "dsn_secret": _dsn(served), "action": "save"})[0] == 303
    file = served.setup.file
    VaultStore(vault_place(load_config(file), file.parent)).set(  # type: ignore[arg-type]
        "onboard.globex", _dsn(served).rsplit("/", 1)[0] + "/gone_database")
    assert main(["transfer", "orders", "--window", "2024-01-01", "--recipient", "globex", "-c", str(file)]) == 1
    status, page = browser.open()
    assert status == 200, page
    [failure] = re.findall(r'<div class="bad">(.*?)</div>', page)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\dZ, orders: destination globex: the database in the destination&#x27;s "
                        r"DSN is gone: the recipient must restore it, or send the DSN of its new database", failure), failure
    assert PASSWORD not in page


def test_a_mariadb_database_is_tested_for_being_free_and_saved_without_a_password(
        served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    from incsync_tests.support.jdbc import MARIADB_PORT, maria_database

    browser = Browser(served, _link(served, capsys))
    browser.open("?kind=mariadb")
    with maria_database() as maria:
        maria.execute("CREATE TABLE theirs (a int)")
        fields = {"host": "127.0.0.1", "port": str(MARIADB_PORT), "user": "root", "password_secret": "", "kind": "mariadb"}
        status, page, _ = browser.post({**fields, "database": maria.name, "action": "test"})
        assert re.findall(r'<div class="bad" role="status">(.*?)</div>', page) == [
            f"Connection failed: database {maria.name} already holds tables incsync did not write (theirs); choose a "
            "new or empty database (incsync creates it)"]
        fresh = maria.name + "_globex"
        try:
            status, page, _ = browser.post({**fields, "database": fresh, "action": "save"})
            assert status == 303, page
        finally:
            maria.execute(f"DROP DATABASE IF EXISTS `{fresh}`")
    assert served.setup.rows("SELECT name, kind, fields, secret FROM incsync_destinations") == [
        ("globex", "mariadb", {"host": "127.0.0.1", "port": MARIADB_PORT, "user": "root", "database": fresh}, None)]


def test_a_link_runs_a_limited_number_of_tests_a_minute(limited, served: Served,  # noqa: ANN001
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    browser = Browser(served, _link(served, capsys))
    browser.open()
    fields = {"schema": "globex", "dsn_secret": "postgresql://x@127.0.0.1:1/none", "action": "test"}
    assert [browser.post(fields)[0] for _ in range(4)] == [400, 400, 400, 429]  # port 1: nothing listens there

"""The provider's JSON API on `incsync serve`: the operations of `incsync onboard` behind the admin bearer token."""

from __future__ import annotations

import json
import logging

import pytest

from incsync.onboarding.links import digest
from incsync_tests.onboarding.conftest import ADMIN_TOKEN, Served, request

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}


def _call(served: Served, path: str, body: object = None, *, headers: dict[str, str] = AUTH) -> tuple[int, object]:
    status, _, raw = request(served.url + "/provider/v1" + path, method="GET" if body is None else "POST",
                             body=None if body is None else json.dumps(body).encode(), headers=headers)
    return status, json.loads(raw)


def test_the_api_creates_attaches_links_revokes_and_lists(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    status, created = _call(served, "/recipients", {"id": "globex", "id_in_provider_system": "org_2", "products": ["core"]})
    assert status == 200 and created["state"] == "awaiting destination" and created["products"] == ["core"]
    assert _call(served, "/recipients/globex/attach", {"tier": "gold"})[1]["tier"] == "gold"

    status, link = _call(served, "/recipients/globex/link", {})
    assert status == 200 and set(link) == {"recipient", "link", "url", "expires_at"}
    token = link["url"].rsplit("/", 1)[1]
    assert link["url"] == f"{served.url}/onboard/{token}"
    assert served.setup.rows("SELECT digest FROM incsync_onboarding_links") == [(digest(token),)]

    status, states = _call(served, "/recipients")
    assert status == 200 and [(s["id"], s["link"], s["tier"]) for s in states] == [("globex", "live", "gold")]
    assert _call(served, "/recipients/globex/revoke", {})[1] == {"revoked": [link["link"]]}
    assert _call(served, "/recipients/globex")[1]["link"] == "revoked"
    status, rows = _call(served, "/audit?recipient=globex")
    assert [(r["actor"], r["action"]) for r in rows] == [("api", "create"), ("api", "attach"), ("api", "link"),
                                                         ("api", "revoke")]
    assert token not in caplog.text and token not in json.dumps(rows)


def test_refusals(served: Served) -> None:
    assert _call(served, "/recipients", headers={}) == (401, {"error": "a valid admin bearer token is required"})
    assert _call(served, "/recipients", headers={"Authorization": "Bearer " + ADMIN_TOKEN[:-1] + "x"})[0] == 401
    assert _call(served, "/recipients/hooli/link", {}) == (404, {
        "error": "recipient hooli is not in public.incsync_recipients; `incsync onboard create hooli ...` creates it"})
    assert _call(served, "/recipients", {"id": "globex"}) == (400, {
        "error": "give `id` and `id_in_provider_system` (strings)"})
    status, _, raw = request(served.url + "/provider/v1/recipients", method="POST", body=b"[", headers=AUTH)
    assert (status, json.loads(raw)) == (400, {"error": "the request body is not JSON"})


def test_without_an_admin_token_every_request_is_refused(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INCSYNC_TEST_ADMIN_TOKEN", "short")
    assert _call(served, "/recipients", headers={"Authorization": "Bearer short"})[0] == 401
    monkeypatch.delenv("INCSYNC_TEST_ADMIN_TOKEN")
    assert _call(served, "/recipients", headers={"Authorization": "Bearer "})[0] == 401


def test_the_admin_token_may_be_a_vault_entry(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from incsync.config.load import load_config
    from incsync.config.secrets import vault_place
    from incsync.secrets.stores import VaultStore

    file = served.setup.file
    VaultStore(vault_place(load_config(file), file.parent)).set("provider_api", "v" * 40)  # type: ignore[arg-type]
    doc = yaml.safe_load(file.read_text())
    doc["onboarding"]["admin_token_secret"] = "vault:provider_api"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    from incsync.onboarding.api import admin_token
    from incsync.onboarding.place import onboarding_place
    from incsync.onboarding.service import Onboarding

    config = load_config(file)
    assert admin_token(Onboarding(onboarding_place(config, file), config)) == "v" * 40

"""`incsync onboard`: recipients created as rows of the recipients table, products and tiers attached, links issued
once (stored hashed), revoked, each recipient's state listed, and an audit row for every change, never a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from incsync.cli.main import main
from incsync.config.load import load_config
from incsync.onboarding.links import TOKEN_PREFIX, digest
from incsync_tests.onboarding.conftest import Setup


def _run(setup: Setup, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["onboard", *args, "-c", str(setup.file)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_create_attach_link_revoke_list_and_audit(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(setup, capsys, "create", "globex", "--id-in-provider-system", "org_2", "--products", "core")
    assert (code, out) == (0, "recipient globex created (disabled until it connects its destination); "
                              "`incsync onboard link globex` issues its link\n")
    assert setup.rows("SELECT id, id_in_provider_system, destination, enabled, tags, products FROM incsync_recipients") == [
        ("globex", "org_2", "globex", False, {}, ["core"])]
    assert [r.id for r in load_config(setup.file).recipients] == ["acme"]  # awaiting its destination: left out, not refused
    assert load_config(setup.file).refused_rows == ()

    assert _run(setup, capsys, "attach", "globex", "--products", "core,extra", "--tier", "gold") == (
        0, "recipient globex: products core,extra, tier gold\n")
    assert setup.rows("SELECT tags, products FROM incsync_recipients") == [({"tier": "gold"}, ["core", "extra"])]

    code, out = _run(setup, capsys, "link", "globex")
    assert code == 0
    url = out.splitlines()[1]
    token = url.rsplit("/", 1)[1]
    assert url == f"http://127.0.0.1:8088/onboard/{token}" and token.startswith(TOKEN_PREFIX)
    stored = setup.rows("SELECT recipient, digest FROM incsync_onboarding_links")
    assert stored == [("globex", digest(token))]  # the digest, never the token

    code, out = _run(setup, capsys, "list", "--json")
    assert code == 0
    [state] = json.loads(out)
    assert {k: state[k] for k in ("id", "state", "destination", "products", "tier", "link")} == {
        "id": "globex", "state": "awaiting destination", "destination": None, "products": ["core", "extra"],
        "tier": "gold", "link": "live"}

    code, out = _run(setup, capsys, "link", "globex")  # a second link revokes the first
    second = out.splitlines()[1].rsplit("/", 1)[1]
    assert setup.rows("SELECT digest, revoked_at IS NOT NULL FROM incsync_onboarding_links ORDER BY created_at") == [
        (digest(token), True), (digest(second), False)]
    code, out = _run(setup, capsys, "revoke", "globex")
    assert code == 0 and out.startswith("recipient globex: link(s) ol_") and out.endswith(" revoked\n")
    code, out = _run(setup, capsys, "status", "globex")
    assert out.splitlines()[1].split() == ["globex", "awaiting", "destination", "-", "revoked", "core,extra", "gold"]

    code, out = _run(setup, capsys, "audit", "--json")
    rows = json.loads(out)
    assert [(r["action"], r["recipient"]) for r in rows] == [
        ("create", "globex"), ("attach", "globex"), ("link", "globex"), ("link", "globex"), ("revoke", "globex")]
    assert all(r["actor"].startswith("cli") for r in rows)
    text = json.dumps(rows) + str(setup.rows("SELECT * FROM incsync_onboarding_audit"))
    assert token not in text and second not in text  # a link's token is in no audit row


def test_refusals_name_the_fix(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(setup, capsys, "create", "globex", "--id-in-provider-system", "org_2", "--products", "nope") == (
        1, "error: unknown product(s) nope; the file's products: core, extra\n")
    assert _run(setup, capsys, "create", "globex", "--id-in-provider-system", "org_2", "--tier", "silver") == (
        1, "error: unknown tier silver; the file's tiers: gold\n")
    assert _run(setup, capsys, "link", "hooli") == (
        1, "error: recipient hooli is not in public.incsync_recipients; `incsync onboard create hooli ...` creates it\n")
    _run(setup, capsys, "create", "globex", "--id-in-provider-system", "org_2")
    assert _run(setup, capsys, "create", "globex", "--id-in-provider-system", "org_2") == (
        1, "error: recipient globex already exists; `incsync onboard attach` changes it\n")
    assert _run(setup, capsys, "revoke", "globex") == (
        1, "error: recipient globex holds no unrevoked link; `incsync onboard link globex` issues one\n")
    assert setup.rows("SELECT action FROM incsync_onboarding_audit") == [("create",)]  # refusals change nothing


@pytest.mark.parametrize(("drop", "says"), [
    ("recipients_from", "onboarding writes recipients into the `recipients_from` table, which is not configured; add "
     "`recipients_from: {source: app_db, table: public.incsync_recipients, destinations_table: "
     "public.incsync_destinations}`"),
    ("destinations_table", "recipients_from.destinations_table is not set; onboarding writes each recipient's "
     "destination there"),
    ("vault", "onboarding keeps each recipient's secret in the vault, and the file has no `vault:` section"),
], ids=["no-recipients-from", "no-destinations-table", "no-vault"])
def test_without_its_tables_onboarding_names_the_setting(setup: Setup, capsys: pytest.CaptureFixture[str],
                                                         drop: str, says: str) -> None:
    doc = yaml.safe_load(setup.file.read_text())
    if drop == "destinations_table":
        del doc["recipients_from"]["destinations_table"]
    else:
        del doc[drop]
    setup.file.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out = _run(setup, capsys, "list")
    assert code == 1
    assert out.startswith(f"error: {Path(setup.file)}: {says}")

"""An onboarding setup: a PostgreSQL database holding the recipients and destinations tables, a file naming them,
products, tiers and a vault (a SQLite file), with the vault's key and the admin token set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from incsync.secrets.keys import new_key
from incsync_tests.support.jdbc import PgDatabase, pg_database
from incsync_tests.support.lake import lake_config

RECIPIENTS = """CREATE TABLE public.incsync_recipients (
    id text PRIMARY KEY, id_in_provider_system text NOT NULL, destination text NOT NULL,
    enabled boolean DEFAULT true, tags jsonb, products text[])"""
DESTINATIONS = """CREATE TABLE public.incsync_destinations (name text PRIMARY KEY, kind text NOT NULL, fields jsonb,
    secret text)"""
ADMIN_TOKEN = "admin-token-for-tests-0123456789abcdef"


@dataclass
class Setup:
    file: Path
    db: PgDatabase

    def rows(self, query: str) -> list[tuple[object, ...]]:
        return self.db.execute(query)


def write_setup(tmp_path: Path, db: PgDatabase, *, onboarding: dict[str, object] | None = None) -> Path:
    file = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "files"}],
                       destinations=[{"name": "files", "kind": "object_storage", "path": "./out"}])
    doc = yaml.safe_load(file.read_text())
    models = [m["model_name"] for m in doc["models"]]
    doc["sources"].append({"name": "app", "vendor": "postgres", "jdbc_url": db.jdbc_url, "user": db.user})
    doc["recipients_from"] = {"source": "app", "table": "public.incsync_recipients",
                              "destinations_table": "public.incsync_destinations", "refresh_seconds": 0}
    doc["products"] = [{"name": "core", "models": models[:1]}, {"name": "extra", "models": models}]
    doc["tiers"] = [{"name": "gold", "frequency": "*/5 * * * *"}]
    doc["vault"] = {"path": "./vault.sqlite", "key_env": "INCSYNC_TEST_VAULT_KEY"}
    doc["onboarding"] = onboarding or {"admin_token_env": "INCSYNC_TEST_ADMIN_TOKEN", "kinds": ["postgres", "mariadb"]}
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    monkeypatch.setenv("INCSYNC_TEST_VAULT_KEY", new_key())
    monkeypatch.setenv("INCSYNC_TEST_ADMIN_TOKEN", ADMIN_TOKEN)
    # The status page opens the instance beside the file, which sets $DAGSTER_HOME for the process (the server's,
    # here the tests'); set through monkeypatch, it is put back after the test for the test files after this one.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / ".dagster"))
    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        yield Setup(write_setup(tmp_path, db), db)


@dataclass
class Served:
    setup: Setup
    url: str


def request(url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None,
            ) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one HTTP request; redirects are not followed."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with opener.open(req, timeout=60) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


@pytest.fixture
def served(setup: Setup) -> Iterator[Served]:
    from incsync.config.load import load_config
    from incsync.onboarding.web import server_routes
    from incsync.sharing.server import ServerThread, build_service
    from incsync_tests.support.host import free_port

    port = free_port()
    doc = yaml.safe_load(setup.file.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}"}
    setup.file.write_text(yaml.safe_dump(doc, sort_keys=False))
    config = load_config(setup.file)
    from incsync.cli.share import recipient_failures

    routes, hidden = server_routes(setup.file, config, failures=recipient_failures(setup.file))
    with ServerThread(build_service(setup.file, config), port=port, extra=routes, hidden=hidden):
        yield Served(setup, f"http://127.0.0.1:{port}")

"""One sharing server for the package's tests: real incsync transfers into Delta tables, the server on a thread
of this process, and a profile per recipient minted by the token store.

Recipients: acme and globex (Delta copies; acme keeps the change data feed), hooli (a Delta copy whose tokens
the token tests rotate and revoke), umbrella (a Delta copy whose tokens the `incsync share` tests mint) and
initech (an object-storage copy, which no share serves).

The Iceberg REST catalog's tests have a world of their own (``iceberg_world``): wayne and stark keep Iceberg
copies, acme a Delta one, from a source of their own.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from incsync.config.load import load_config
from incsync.config.sharing import SharingConfig
from incsync.sharing.iceberg.answers import IcebergService
from incsync.sharing.server import ServerThread, build_service, iceberg_service, profile, token_store, write_profile
from incsync.sharing.service import SharingService
from incsync.sharing.tokens import Minted, TokenStore
from incsync_tests.support import arrow_transfer
from incsync_tests.support.host import free_port
from incsync_tests.support.lake import lake_config, order, ts, write_table

DAY1 = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2), amount=2.5), order(3, "org_2", ts(1, 3)),
        order(5, "org_3", ts(1, 4)), order(6, "org_4", ts(1, 5)), order(8, "org_5", ts(1, 6))]
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
    {"id": "hooli", "id_in_provider_system": "org_3", "destination": "hooli_delta"},
    {"id": "initech", "id_in_provider_system": "org_4", "destination": "initech_files"},
    {"id": "umbrella", "id_in_provider_system": "org_5", "destination": "umbrella_delta"},
]
DESTINATIONS = [
    {"name": "acme_delta", "kind": "delta", "path": "./out/acme", "change_data_feed": True},
    {"name": "globex_delta", "kind": "delta", "path": "./out/globex"},
    {"name": "hooli_delta", "kind": "delta", "path": "./out/hooli"},
    {"name": "initech_files", "kind": "object_storage", "path": "./out/initech"},
    {"name": "umbrella_delta", "kind": "delta", "path": "./out/umbrella"},
]
TABLE = "sales.orders"  # every share lists the model `orders` as sales.orders (sharing.tables)
HOUR = 3600


@dataclass
class World:
    root: Path
    config: Path
    service: SharingService
    store: TokenStore
    sharing: SharingConfig
    endpoint: str
    port: int
    minted: dict[str, Minted] = field(default_factory=dict)

    def transfer(self, recipient: str, window: str, *, scheduled: bool, full_refresh: bool = False) -> None:
        arrow_transfer.run(self.config, window, scheduled=scheduled, full_refresh=full_refresh, recipient_id=recipient,
                           staging_root=self.root / "staging")

    def write_source(self, rows: list[dict[str, Any]]) -> None:
        write_table(self.root / "src", "orders", rows)

    def profile(self, recipient: str) -> str:
        return str(self.root / f"{recipient}.share")

    def url(self, recipient: str, table: str = TABLE, share: str | None = None) -> str:
        return f"{self.profile(recipient)}#{share or recipient}.{table}"

    def token(self, recipient: str) -> str:
        return self.minted[recipient].token

    def get(self, path: str, token: str | None, *, headers: dict[str, str] | None = None, **kwargs: Any) -> requests.Response:
        auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return requests.get(self.endpoint + path, headers=auth | (headers or {}), timeout=10, **kwargs)

    def post(self, path: str, token: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(self.endpoint + path, headers={"Authorization": f"Bearer {token}"}, json=body, timeout=10)

    def raw_get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        """GET ``path`` exactly as written (no client folds ``..`` or percent-escapes away)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def query_lines(self, recipient: str, body: dict[str, Any] | None = None, table: str = "sales/tables/orders"
                    ) -> list[dict[str, Any]]:
        answer = self.post(f"/shares/{recipient}/schemas/{table}/query", self.token(recipient), body or {})
        assert answer.status_code == 200, answer.text
        return [json.loads(line) for line in answer.text.splitlines()]

    def mint(self, recipient: str) -> Minted:
        minted = self.store.create(recipient, lifetime_seconds=HOUR)
        self.minted[recipient] = minted
        write_profile(Path(self.profile(recipient)), profile(self.sharing, minted))
        return minted


@pytest.fixture(scope="package")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("sharing")
    write_table(root / "src", "orders", DAY1)
    config = lake_config(root, recipients=RECIPIENTS, destinations=DESTINATIONS)
    port = free_port()
    doc = yaml.safe_load(config.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_config(config)
    found = World(root=root, config=config, service=build_service(config, loaded), store=token_store(config, loaded.sharing),
                  sharing=loaded.sharing, endpoint=f"http://127.0.0.1:{port}/delta-sharing", port=port)
    for recipient in [r["id"] for r in RECIPIENTS]:
        found.transfer(recipient, "2024-01-01", scheduled=False)
    for recipient in ("acme", "globex", "hooli"):
        found.mint(recipient)
    with ServerThread(found.service, port=port):
        yield found


ICEBERG_DAY1 = [order(1, "org_6", ts(1, 1)), order(2, "org_6", ts(1, 2), amount=2.5), order(3, "org_7", ts(1, 3)),
                order(4, "org_1", ts(1, 4))]
ICEBERG_RECIPIENTS = [
    {"id": "wayne", "id_in_provider_system": "org_6", "destination": "wayne_iceberg"},
    {"id": "stark", "id_in_provider_system": "org_7", "destination": "stark_iceberg"},
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
]
ICEBERG_DESTINATIONS = [
    {"name": "wayne_iceberg", "kind": "iceberg", "path": "./out/wayne"},
    {"name": "stark_iceberg", "kind": "iceberg", "path": "./out/stark"},
    {"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
]


@dataclass
class IcebergWorld:
    root: Path
    config: Path
    service: SharingService
    iceberg: IcebergService  # the catalog's answers beside the server's own, on the same key: its credentials pass
    store: TokenStore
    uri: str
    port: int
    minted: dict[str, Minted] = field(default_factory=dict)

    def transfer(self, recipient: str, window: str, *, scheduled: bool) -> None:
        arrow_transfer.run(self.config, window, scheduled=scheduled, recipient_id=recipient, staging_root=self.root / "staging")

    def token(self, recipient: str) -> str:
        return self.minted[recipient].token

    def catalog(self, recipient: str, **properties: str) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(recipient, uri=self.uri, token=self.token(recipient), **properties)

    def request(self, method: str, path: str, token: str | None, **kwargs: Any) -> requests.Response:
        auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return requests.request(method, self.uri + path, headers=auth, timeout=10, **kwargs)

    def raw(self, method: str, path: str, token: str | None = None) -> tuple[int, bytes]:
        """``path`` sent exactly as written (no client folds ``..`` or percent-escapes away)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@pytest.fixture(scope="package")
def iceberg_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergWorld]:
    root = tmp_path_factory.mktemp("iceberg_sharing")
    write_table(root / "src", "orders", ICEBERG_DAY1)
    config = lake_config(root, recipients=ICEBERG_RECIPIENTS, destinations=ICEBERG_DESTINATIONS)
    port = free_port()
    doc = yaml.safe_load(config.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_config(config)
    service = build_service(config, loaded)
    found = IcebergWorld(root=root, config=config, service=service, iceberg=iceberg_service(service),
                         store=token_store(config, loaded.sharing), uri=f"http://127.0.0.1:{port}/iceberg", port=port)
    for recipient in [r["id"] for r in ICEBERG_RECIPIENTS]:
        found.transfer(recipient, "2024-01-01", scheduled=False)
        found.minted[recipient] = found.store.create(recipient, lifetime_seconds=HOUR)
    with ServerThread(service, port=port):
        yield found

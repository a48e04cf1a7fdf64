"""Recipients' Iceberg copies whose warehouse is on S3 (the moto server the tests start), written by real
transfers and served by the Iceberg REST catalog: pyiceberg's RestCatalog lists and scans exactly each recipient's
rows, the catalog plans from the bucket and its storage endpoint proxies the bucket's objects (byte ranges too)
under the vended credentials; another table's key, metadata, traversal and a revoked token read nothing, and
neither the bucket, its endpoint nor its key reaches an answer or the log."""

from __future__ import annotations

import http.client
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
import yaml
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from incsync.config.load import load_config
from incsync.sharing.iceberg import sigv4
from incsync.sharing.protocol import Caller
from incsync.sharing.server import ServerThread, build_service, iceberg_service, token_store
from incsync.storage.filesystems import filesystem, resolve_options
from incsync_tests.sharing.conftest import HOUR
from incsync_tests.support import arrow_transfer
from incsync_tests.support.host import free_port
from incsync_tests.support.lake import lake_config, order, ts, write_table
from incsync_tests.support.s3 import SECRET

DAY1 = [order(1, "org_6", ts(1, 1)), order(2, "org_6", ts(1, 2), amount=2.5), order(3, "org_7", ts(1, 3)),
        order(4, "org_1", ts(1, 4))]
DAY2 = [order(1, "org_6", ts(2, 1), status="paid"), *DAY1[1:], order(5, "org_6", ts(2, 3)), order(6, "org_7", ts(2, 4))]
ACCESS_DENIED = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["organization_id"], r["status"], r["amount"]) for r in table.to_pylist())


def expected(source: list[dict[str, Any]], org: str) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["organization_id"], r["status"], r["amount"]) for r in source if r["organization_id"] == org)


def _tampered(token: str) -> str:
    return token[:-1] + ("A" if token[-1] != "A" else "B")


@dataclass
class S3World:
    root: Path
    config: Path
    bucket: str
    options: dict[str, str]
    port: int
    service: Any
    iceberg: Any
    store: Any
    tokens: dict[str, Any]

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/iceberg"

    def transfer(self, recipient: str, window: str, *, scheduled: bool) -> None:
        arrow_transfer.run(self.config, window, scheduled=scheduled, recipient_id=recipient, staging_root=self.root / "staging")

    def catalog(self, recipient: str) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(recipient, uri=self.uri, token=self.tokens[recipient].token)

    def credentials(self, recipient: str, *, now: float | None = None) -> dict[str, str]:
        table = self.service.catalogs().share_of(recipient, "iceberg").tables[0]
        caller = Caller(recipient=recipient, token_id=self.tokens[recipient].record.id)
        config: dict[str, str] = self.iceberg.vendor.vend(caller, table, now=time.time() if now is None else now)["config"]
        return config

    def data_key(self, recipient: str) -> str:
        plan = requests.post(f"{self.uri}/v1/{recipient}/namespaces/sales/tables/orders/plan", json={}, timeout=10,
                             headers={"Authorization": f"Bearer {self.tokens[recipient].token}"})
        assert plan.status_code == 200, plan.text
        return str(plan.json()["file-scan-tasks"][0]["data-file"]["file-path"]).removeprefix("s3://")

    def signed(self, key: str, config: dict[str, str], *, method: str = "GET",
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """``method`` on the storage endpoint's ``key``, sent exactly as written and signed by botocore's S3 signer."""
        path = "/iceberg/s3/" + key
        request = AWSRequest(method=method, url=f"http://127.0.0.1:{self.port}{path}",
                             headers={"x-amz-content-sha256": sigv4.EMPTY_SHA256, **(headers or {})})
        creds = Credentials(config["s3.access-key-id"], config["s3.secret-access-key"], config["s3.session-token"])
        S3SigV4Auth(creds, "s3", "us-east-1").add_auth(request)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, headers=dict(request.headers.items()))
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def in_bucket(self, key: str) -> bytes:
        """The bytes of the provider's object behind the endpoint's ``key`` (``shares/<recipient>/sales/orders/...``)."""
        recipient, rel = key.split("/")[1], key.split("/orders/", 1)[1]
        fs, path = filesystem(f"s3://{self.bucket}/{recipient}/incsync/orders/{rel}", self.options)
        with fs.open_input_stream(path) as stream:
            data: bytes = stream.read()
        return data


@pytest.fixture
def s3_world(s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3World]:
    bucket = s3.bucket()
    write_table(tmp_path / "src", "orders", DAY1)
    destinations = []
    for recipient in ("wayne", "stark"):
        monkeypatch.setenv(f"{recipient.upper()}_CATALOG", f"sqlite:///{tmp_path / f'{recipient}-catalog.db'}")
        scheme = "s3a" if recipient == "stark" else "s3"  # both spellings of S3 a destination may use
        destinations.append({"name": f"{recipient}_s3", "kind": "iceberg", "path": f"{scheme}://{bucket}/{recipient}",
                             "catalog_uri_env": f"{recipient.upper()}_CATALOG", "storage_options": s3.options()})
    config = lake_config(tmp_path, destinations=destinations, recipients=[
        {"id": "wayne", "id_in_provider_system": "org_6", "destination": "wayne_s3"},
        {"id": "stark", "id_in_provider_system": "org_7", "destination": "stark_s3"}])
    port = free_port()
    doc = yaml.safe_load(config.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_config(config)
    service = build_service(config, loaded)
    store = token_store(config, loaded.sharing)
    world = S3World(root=tmp_path, config=config, bucket=bucket, options=resolve_options(s3.options(), "test"), port=port,
                    service=service, iceberg=iceberg_service(service), store=store, tokens={})
    for recipient in ("wayne", "stark"):
        world.transfer(recipient, "2024-01-01", scheduled=False)
        world.tokens[recipient] = store.create(recipient, lifetime_seconds=HOUR)
    with ServerThread(service, port=port):
        yield world


def test_pyiceberg_scans_exactly_each_recipients_rows_from_the_bucket(
        s3_world: S3World, s3, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="incsync.sharing"):
        wayne = s3_world.catalog("wayne")
        assert wayne.list_namespaces() == [("sales",)]
        assert wayne.list_tables("sales") == [("sales", "orders")]
        table = wayne.load_table("sales.orders")
        assert table.metadata_location.startswith("s3://shares/wayne/sales/orders/metadata/")
        assert table.io.properties["s3.endpoint"] == f"http://127.0.0.1:{s3_world.port}/iceberg/s3"
        assert rows(table.scan().to_arrow()) == expected(DAY1, "org_6")
        backfill = table.current_snapshot().snapshot_id

        write_table(s3_world.root / "src", "orders", DAY2)
        s3_world.transfer("wayne", "2024-01-02", scheduled=True)
        table = wayne.load_table("sales.orders")
        assert table.current_snapshot().snapshot_id != backfill
        assert rows(table.scan().to_arrow()) == expected(DAY2, "org_6")
        assert rows(table.scan(snapshot_id=backfill).to_arrow()) == expected(DAY1, "org_6")
        assert table.scan().count() == 3
        assert rows(s3_world.catalog("stark").load_table("sales.orders").scan().to_arrow()) == expected(DAY1, "org_7")

        token = s3_world.tokens["wayne"].token
        for path in ("/v1/wayne/namespaces/sales/tables/orders", "/v1/wayne/namespaces/sales/tables/orders/credentials"):
            answer = requests.get(s3_world.uri + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
            assert answer.status_code == 200
            for secret in (s3_world.bucket, s3.endpoint, SECRET, "incsync.", "org_6", token):
                assert secret not in answer.text
    for secret in (SECRET, token, s3_world.tokens["stark"].token):
        assert secret not in caplog.text


def test_the_storage_endpoint_proxies_the_bucket_with_byte_ranges(s3_world: S3World) -> None:
    key = s3_world.data_key("wayne")
    mine = s3_world.credentials("wayne")
    whole = s3_world.in_bucket(key)
    assert whole[:4] == b"PAR1"
    status, headers, body = s3_world.signed(key, mine, method="HEAD")
    assert (status, headers["content-length"], body) == (200, str(len(whole)), b"")
    assert s3_world.signed(key, mine)[::2] == (200, whole)
    status, headers, body = s3_world.signed(key, mine, headers={"Range": "bytes=4-99"})
    assert (status, headers["content-range"], body) == (206, f"bytes 4-99/{len(whole)}", whole[4:100])
    status, headers, body = s3_world.signed(key, mine, headers={"Range": "bytes=-8"})
    assert (status, headers["content-range"], body) == (206, f"bytes {len(whole) - 8}-{len(whole) - 1}/{len(whole)}", whole[-8:])
    assert s3_world.signed(key, mine, headers={"Range": f"bytes={len(whole)}-"})[0] == 416


def test_the_s3_backed_endpoint_refuses_another_tables_key_metadata_traversal_and_a_revoked_token(s3_world: S3World) -> None:
    wayne_key, stark_key = s3_world.data_key("wayne"), s3_world.data_key("stark")
    wayne, stark = s3_world.credentials("wayne"), s3_world.credentials("stark")
    assert s3_world.signed(stark_key, stark)[0] == 200
    metadata = requests.get(f"{s3_world.uri}/v1/stark/namespaces/sales/tables/orders", timeout=10,
                            headers={"Authorization": f"Bearer {s3_world.tokens['stark'].token}"}).json()["metadata-location"]
    stark_file = stark_key.split("/data/")[1]
    refused = {
        "another table's key": s3_world.signed(wayne_key, stark),
        "another table's key, its own credentials' prefix": s3_world.signed(
            f"shares/stark/sales/orders/../../../wayne/sales/orders/data/{wayne_key.split('/data/')[1]}", stark),
        "a metadata file": s3_world.signed(metadata.removeprefix("s3://"), stark),
        "the bucket's other folder": s3_world.signed("shares/stark/sales/orders/../../wayne/incsync/orders/data/" + stark_file, stark),
        "traversal into metadata": s3_world.signed(f"shares/stark/sales/orders/data/../metadata/{metadata.rsplit('/', 1)[1]}", stark),
        "an empty segment": s3_world.signed(f"shares/stark/sales/orders//data/{stark_file}", stark),
        "a missing object": s3_world.signed("shares/stark/sales/orders/data/nothing.parquet", stark),
        "a write": s3_world.signed(stark_key, stark, method="PUT"),
        "a tampered signature": s3_world.signed(stark_key, {**stark, "s3.secret-access-key": wayne["s3.secret-access-key"]}),
        "expired credentials": s3_world.signed(stark_key, s3_world.credentials(
            "stark", now=time.time() - s3_world.iceberg.vendor.lifetime_seconds - 1)),
        "a tampered session token": s3_world.signed(stark_key, {**stark, "s3.session-token": _tampered(stark["s3.session-token"])}),
    }
    assert {name: (status, body) for name, (status, _, body) in refused.items()} == {
        name: (403, ACCESS_DENIED) for name in refused}
    s3_world.store.revoke("stark")
    assert s3_world.signed(stark_key, stark)[::2] == (403, ACCESS_DENIED)
    assert s3_world.signed(wayne_key, wayne)[0] == 200

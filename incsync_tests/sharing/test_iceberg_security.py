"""What the Iceberg REST catalog refuses: wrong, expired, rotated-out and revoked tokens; another recipient's
prefix, namespace and table, answered as if they did not exist; path traversal in every path parameter and in
the storage endpoint's keys; every write route; file requests without the table's credentials, with forged,
expired, revoked or another table's; and no token or credential in a log."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import time
from pathlib import Path

import pytest
import requests
import yaml
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from pyiceberg.exceptions import UnauthorizedError

from incsync.sharing.iceberg import sigv4
from incsync.sharing.iceberg.api import RestError
from incsync.sharing.iceberg.credentials import TableGrant
from incsync.sharing.iceberg.routes import WRITES
from incsync.sharing.protocol import Caller
from incsync.sharing.server import build_service, iceberg_service
from incsync_tests.sharing.conftest import HOUR, IcebergWorld

UNAUTHENTICATED = {"error": {"message": "The bearer token is missing, wrong, expired or revoked.",
                             "type": "NotAuthorizedException", "code": 401}}
NO_SUCH_NAMESPACE = {"error": {"message": "The namespace does not exist or is not shared with you.",
                               "type": "NoSuchNamespaceException", "code": 404}}
NO_SUCH_TABLE = {"error": {"message": "The table does not exist or is not shared with you.",
                           "type": "NoSuchTableException", "code": 404}}
ACCESS_DENIED = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
EMPTY = sigv4.EMPTY_SHA256


def _credentials(world: IcebergWorld, recipient: str, *, now: float | None = None, token_id: str | None = None) -> dict[str, str]:
    table = world.service.catalogs().share_of(recipient, "iceberg").tables[0]
    caller = Caller(recipient=recipient, token_id=token_id or world.minted[recipient].record.id)
    return world.iceberg.vendor.vend(caller, table, now=time.time() if now is None else now)["config"]


def _data_key(world: IcebergWorld, recipient: str) -> str:
    plan = world.request("POST", f"/v1/{recipient}/namespaces/sales/tables/orders/plan", world.token(recipient), json={})
    return plan.json()["file-scan-tasks"][0]["data-file"]["file-path"].removeprefix("s3://")


def _signed(world: IcebergWorld, key: str, config: dict[str, str], *, method: str = "GET",
            secret: str | None = None) -> tuple[int, bytes]:
    """``method`` on the storage endpoint's ``key``, sent exactly as written and signed by botocore's S3 signer."""
    path = "/iceberg/s3/" + key
    request = AWSRequest(method=method, url=f"http://127.0.0.1:{world.port}{path}", headers={"x-amz-content-sha256": EMPTY})
    creds = Credentials(config["s3.access-key-id"], secret or config["s3.secret-access-key"], config["s3.session-token"])
    S3SigV4Auth(creds, "s3", "us-east-1").add_auth(request)
    conn = http.client.HTTPConnection("127.0.0.1", world.port, timeout=10)
    try:
        conn.request(method, path, headers=dict(request.headers.items()))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer wrong", "Basic YWNtZTp4", "Bearer " + "x" * 5000],
                         ids=["none", "empty", "wrong", "basic", "huge"])
def test_a_request_without_a_live_bearer_token_is_401(iceberg_world: IcebergWorld, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in (("GET", "/v1/config"), ("GET", "/v1/wayne/namespaces"), ("HEAD", "/v1/wayne/namespaces/sales"),
                         ("GET", "/v1/wayne/namespaces/sales/tables/orders"), ("POST", "/v1/wayne/namespaces")):
        answer = requests.request(method, iceberg_world.uri + path, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        if method != "HEAD":
            assert answer.json() == UNAUTHENTICATED


def test_expired_rotated_out_and_revoked_tokens_are_401_also_in_pyiceberg(iceberg_world: IcebergWorld) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    store = iceberg_world.store
    expired = store.create("nobody", lifetime_seconds=60, now=time.time() - HOUR)
    rotated_out, _ = store.rotate("wayne", lifetime_seconds=HOUR, overlap_seconds=HOUR)
    assert iceberg_world.request("GET", "/v1/wayne/namespaces", rotated_out.token).status_code == 200
    store.revoke("wayne", token_id=rotated_out.record.id)
    live = iceberg_world.token("wayne")
    for token in (expired.token, rotated_out.token, live[:-1] + ("A" if live[-1] != "A" else "B")):
        assert iceberg_world.request("GET", "/v1/config", token).json() == UNAUTHENTICATED
        with pytest.raises(UnauthorizedError):
            RestCatalog("wayne", uri=iceberg_world.uri, token=token)
    assert iceberg_world.request("GET", "/v1/wayne/namespaces", iceberg_world.token("wayne")).status_code == 200


def test_another_recipients_catalog_answers_as_if_it_did_not_exist(iceberg_world: IcebergWorld) -> None:
    stark = iceberg_world.token("stark")
    for method, path, expected in [
        ("GET", "/v1/wayne/namespaces", NO_SUCH_NAMESPACE), ("GET", "/v1/wayne/namespaces/sales", NO_SUCH_NAMESPACE),
        ("GET", "/v1/wayne/namespaces/sales/tables", NO_SUCH_NAMESPACE), ("GET", "/v1/Wayne/namespaces/sales", NO_SUCH_NAMESPACE),
        ("GET", "/v1/wayne/namespaces/sales/tables/orders", NO_SUCH_TABLE),
        ("GET", "/v1/wayne/namespaces/sales/tables/orders/credentials", NO_SUCH_TABLE),
        ("POST", "/v1/wayne/namespaces/sales/tables/orders/plan", NO_SUCH_TABLE),
        ("GET", "/v1/nobody/namespaces/sales/tables/orders", NO_SUCH_TABLE),
        ("GET", "/v1/stark/namespaces/sales/tables/customers", NO_SUCH_TABLE),
    ]:
        answer = iceberg_world.request(method, path, stark)
        assert (answer.status_code, answer.json()) == (404, expected), path
    assert iceberg_world.request("HEAD", "/v1/wayne/namespaces/sales/tables/orders", stark).status_code == 404
    refused = iceberg_world.request("GET", "/v1/config?warehouse=wayne", stark)
    assert refused.status_code == 403 and "wayne" not in refused.text


@pytest.mark.parametrize("path", [
    "/iceberg/v1/..%2Fwayne/namespaces",
    "/iceberg/v1/stark%2F..%2Fwayne/namespaces/sales/tables",
    "/iceberg/v1/../v1/wayne/namespaces",
    "/iceberg/v1/stark/../wayne/namespaces/sales/tables/orders",
    "/iceberg/v1/stark/namespaces/..%2F..%2Fwayne%2Fnamespaces%2Fsales/tables",
    "/iceberg/v1/stark/namespaces/sales%1F..%1F..%1Fwayne/tables/orders",
    "/iceberg/v1/stark/namespaces/%2E%2E/tables/orders",
    "/iceberg/v1/stark/namespaces/sales/tables/..%2F..%2F..%2Fwayne%2Fnamespaces%2Fsales%2Ftables%2Forders",
    "/iceberg/v1/stark/namespaces/sales/tables/%2E%2E%2F%2E%2E%2F%2E%2E%2Fwayne%2Fnamespaces%2Fsales%2Ftables%2Forders",
    "/iceberg/v1/stark/namespaces/sales/tables/orders%00",
], ids=["prefix", "prefix-nested", "dots", "dots-after-prefix", "namespace", "namespace-separator", "namespace-dots",
        "table", "table-escaped", "table-nul"])
def test_traversal_in_any_path_parameter_is_a_404_naming_nothing(iceberg_world: IcebergWorld, path: str) -> None:
    status, body = iceberg_world.raw("GET", path, iceberg_world.token("stark"))
    assert status == 404
    assert json.loads(body)["error"]["code"] == 404
    assert b"wayne" not in body and b"org_" not in body


@pytest.mark.parametrize(("path", "method"), WRITES, ids=[f"{m} {p.removeprefix('/iceberg/v1/{prefix}')}" for p, m in WRITES])
def test_every_write_route_is_refused(iceberg_world: IcebergWorld, path: str, method: str) -> None:
    before = iceberg_world.request("GET", "/v1/stark/namespaces/sales/tables/orders", iceberg_world.token("stark")).json()
    filled = path.removeprefix("/iceberg").format(prefix="stark", namespace="sales", table="orders", view="v")
    answer = iceberg_world.request(method, filled, iceberg_world.token("stark"), json={"name": "t", "namespace": ["x"]})
    assert answer.status_code == 403
    assert answer.json()["error"]["type"] == "ForbiddenException"
    after = iceberg_world.request("GET", "/v1/stark/namespaces/sales/tables/orders", iceberg_world.token("stark")).json()
    assert after["metadata"]["current-snapshot-id"] == before["metadata"]["current-snapshot-id"]


def test_a_method_no_route_takes_is_405_in_the_error_model(iceberg_world: IcebergWorld) -> None:
    for method, path in (("PUT", "/v1/stark/namespaces"), ("PATCH", "/v1/stark/namespaces/sales/tables/orders"),
                         ("DELETE", "/v1/config")):
        answer = iceberg_world.request(method, path, iceberg_world.token("stark"))
        assert (answer.status_code, answer.json()) == (405, {"error": {
            "message": "Method not allowed.", "type": "MethodNotAllowedException", "code": 405}}), path


def test_data_files_need_the_tables_own_live_unexpired_credentials(iceberg_world: IcebergWorld) -> None:
    key = _data_key(iceberg_world, "stark")
    mine = _credentials(iceberg_world, "stark")
    status, body = _signed(iceberg_world, key, mine)
    assert status == 200 and body[:4] == b"PAR1"
    assert _signed(iceberg_world, key, mine, method="HEAD")[0] == 200

    wayne_key = _data_key(iceberg_world, "wayne")
    metadata_key = key.split("/data/")[0] + "/metadata/" + "x.metadata.json"
    payload, _, mac = mine["s3.session-token"].partition(".")
    grant = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    tampered = base64.urlsafe_b64encode(json.dumps(grant | {"recipient": "wayne", "share": "wayne"}, separators=(",", ":"),
                                                   sort_keys=True).encode()).rstrip(b"=").decode()
    refusals = {
        "another table's key": _signed(iceberg_world, wayne_key, mine),
        "a metadata file": _signed(iceberg_world, metadata_key, mine),
        "traversal": _signed(iceberg_world, key.split("/data/")[0] + "/../../../wayne/sales/orders/" + wayne_key.split("/orders/")[1], mine),
        "escaped traversal": _signed(iceberg_world, "shares/stark/sales/orders/%2E%2E/%2E%2E/%2E%2E/wayne/sales/orders/"
                                     + wayne_key.split("/orders/")[1], mine),
        "a wrong secret": _signed(iceberg_world, key, mine, secret="x" * 43),
        "a tampered session token": _signed(iceberg_world, key, mine | {"s3.session-token": f"{tampered}.{mac}"}),
        "expired credentials": _signed(iceberg_world, key, _credentials(iceberg_world, "stark", now=time.time() - HOUR)),
        "a PUT": _signed(iceberg_world, key, mine, method="PUT"),
        "another bucket": _signed(iceberg_world, "other/" + key.removeprefix("shares/"), mine),
    }
    assert {what: refusal for what, refusal in refusals.items()} == {what: (403, ACCESS_DENIED) for what in refusals}
    unsigned = requests.get(f"{iceberg_world.uri}/s3/{key}", headers={"x-amz-security-token": mine["s3.session-token"]}, timeout=10)
    assert (unsigned.status_code, unsigned.content) == (403, ACCESS_DENIED)

    # Behind a valid signature, the key alone decides: only the grant's table's data files.
    grant = TableGrant(recipient="stark", token_id=iceberg_world.minted["stark"].record.id, share="stark", schema="sales",
                       table="orders", expires_ms=int((time.time() + 60) * 1000))
    file = key.split("/data/")[1]
    assert iceberg_world.iceberg.file(grant, f"stark/sales/orders/data/{file}") is not None
    for other in (f"wayne/sales/orders/data/{wayne_key.split('/data/')[1]}", f"stark/sales/orders/../../../wayne/sales/orders/"
                  f"data/{wayne_key.split('/data/')[1]}", "stark/sales/orders/data/../metadata/x.metadata.json",
                  "stark/sales/orders/metadata", "stark/sales/orders/", "stark/sales/orders/data",
                  f"stark/sales/orders/data/{file}/..", "stark/sales/orders/../../../../../etc/passwd"):
        assert iceberg_world.iceberg.file(grant, other) is None, other


def test_credentials_stop_reading_when_their_token_is_revoked(iceberg_world: IcebergWorld) -> None:
    key = _data_key(iceberg_world, "stark")
    rotated, _ = iceberg_world.store.rotate("stark", lifetime_seconds=HOUR, overlap_seconds=HOUR)
    theirs = _credentials(iceberg_world, "stark", token_id=rotated.record.id)
    assert _signed(iceberg_world, key, theirs)[0] == 200
    iceberg_world.store.revoke("stark", token_id=rotated.record.id)
    assert _signed(iceberg_world, key, theirs) == (403, ACCESS_DENIED)


def test_a_table_stamped_for_another_recipient_is_not_served(iceberg_world: IcebergWorld, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """The configuration points stark at wayne's warehouse: the owner stamp keeps wayne's rows from stark."""
    doc = yaml.safe_load(iceberg_world.config.read_text())
    doc["recipients"] = [r for r in doc["recipients"] if r["id"] != "wayne"]
    doc["destinations"] = [d | {"path": str(iceberg_world.root / d["path"])} for d in doc["destinations"]
                           if d["name"] != "wayne_iceberg"]
    doc["destinations"][0]["path"] = str(iceberg_world.root / "out/wayne")
    doc["sources"][0]["path"] = str(iceberg_world.root / "src")
    moved = tmp_path / "incsync.yaml"
    moved.write_text(yaml.safe_dump(doc))
    iceberg = iceberg_service(build_service(moved))
    caller = Caller(recipient="stark", token_id="tok_test")
    assert iceberg.list_tables(caller, {}, prefix="stark", namespace="sales") == {
        "identifiers": [{"namespace": ["sales"], "name": "orders"}], "next-page-token": None}
    with caplog.at_level(logging.WARNING), pytest.raises(RestError) as refused:
        iceberg.load_table(caller, {}, prefix="stark", namespace="sales", table="orders")
    assert refused.value.body() == NO_SUCH_TABLE
    assert "the Iceberg table is stamped for wayne, not recipient stark; refused" in caplog.text


def test_no_token_or_credential_reaches_the_log(iceberg_world: IcebergWorld, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    catalog = iceberg_world.catalog("stark")
    loaded = iceberg_world.request("GET", "/v1/stark/namespaces/sales/tables/orders", iceberg_world.token("stark")).json()
    assert catalog.load_table("sales.orders").scan().to_arrow().num_rows >= 1
    iceberg_world.request("GET", "/v1/wayne/namespaces/sales/tables/orders", iceberg_world.token("stark"))
    text = caplog.text
    assert "GET /iceberg/v1/stark/namespaces/sales/tables/orders 200 recipient=stark" in text
    assert "GET /iceberg/s3/shares/stark/sales/orders/data/" in text
    for secret in (iceberg_world.token("stark"), *loaded["storage-credentials"][0]["config"].values()):
        if len(secret) > 20:
            assert secret not in text


def test_the_signature_check_agrees_with_botocore_and_refuses_any_change() -> None:
    now = time.time()
    request = AWSRequest(method="GET", url="http://h:1/iceberg/s3/shares/a/b/c/data/x%20y.parquet?versionId=1",
                         headers={"x-amz-content-sha256": EMPTY, "Range": "bytes=0-9"})
    S3SigV4Auth(Credentials("AK", "secret", "session"), "s3", "eu-west-3").add_auth(request)
    headers = {k.lower(): v for k, v in request.headers.items()} | {"host": "h:1"}
    signed = sigv4.parse(headers["authorization"])
    assert signed is not None and signed.region == "eu-west-3"

    def check(**changes: object) -> bool:
        args: dict = {"secret": "secret", "method": "GET", "path": "/iceberg/s3/shares/a/b/c/data/x%20y.parquet",
                      "query": "versionId=1", "headers": headers, "now": now} | changes
        return sigv4.verify(signed, **args)

    assert check()
    assert not check(secret="other")
    assert not check(method="HEAD")
    assert not check(path="/iceberg/s3/shares/a/b/d/data/x%20y.parquet")
    assert not check(query="versionId=2")
    assert not check(headers=headers | {"range": "bytes=0-99"})
    assert not check(now=now + 3600)

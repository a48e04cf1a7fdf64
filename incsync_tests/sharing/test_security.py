"""What the sharing server refuses: wrong, expired, rotated-out and revoked tokens; another recipient's share
and tables, answered as if they did not exist; path traversal in every path parameter; tampered, forged and
expired file URLs; and no token or signed URL in a log or another answer."""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import delta_sharing
import pytest
import requests
import yaml
from requests.exceptions import HTTPError

from incsync.sharing.protocol import Caller, ProtocolError
from incsync.sharing.reads import table_metadata
from incsync.sharing.server import build_service
from incsync.sharing.signing import FileGrant, UrlSigner
from incsync_tests.sharing.conftest import HOUR, World

T = "/shares/{share}/schemas/{schema}/tables/{table}"
NOT_FOUND = {"errorCode": "RESOURCE_DOES_NOT_EXIST",
             "message": "The share, schema or table does not exist or is not shared with you."}


def _file_urls(world: World, recipient: str) -> list[str]:
    return [line["file"]["url"] for line in world.query_lines(recipient) if "file" in line]


def _segment(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _payload(segment: str) -> dict:
    text = segment.partition(".")[0]
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _with_payload(segment: str, payload: dict) -> str:
    text = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()).rstrip(b"=").decode()
    return f"{text}.{segment.partition('.')[2]}"


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer wrong", "Basic YWNtZTp4", "Bearer " + "x" * 5000],
                         ids=["none", "empty", "wrong", "basic", "huge"])
def test_a_request_without_a_live_bearer_token_is_401(world: World, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for path in ("/shares", "/shares/acme/all-tables", T.format(share="acme", schema="sales", table="orders") + "/metadata"):
        answer = requests.get(world.endpoint + path, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.json()["errorCode"] == "UNAUTHENTICATED"
        assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_an_altered_token_is_401(world: World) -> None:
    token = world.token("acme")
    altered = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert world.get("/shares", altered).status_code == 401
    assert world.get("/shares", token).status_code == 200


def test_an_expired_token_is_401_also_in_the_official_client(world: World, tmp_path: Path) -> None:
    expired = world.store.create("initech", lifetime_seconds=60, now=time.time() - HOUR)
    assert world.get("/shares", expired.token).status_code == 401
    profile = json.loads(Path(world.profile("globex")).read_text()) | {"bearerToken": expired.token}
    (tmp_path / "expired.share").write_text(json.dumps(profile))
    with pytest.raises(HTTPError) as refused:
        delta_sharing.SharingClient(str(tmp_path / "expired.share")).list_shares()
    assert refused.value.response.status_code == 401


def test_a_live_token_of_a_recipient_whose_copy_no_share_serves_sees_nothing(world: World) -> None:
    live = world.store.create("initech", lifetime_seconds=HOUR)  # its copy is object storage
    assert world.get("/shares", live.token).json() == {"items": []}
    assert world.get("/shares/initech", live.token).json() == NOT_FOUND
    world.store.revoke("initech")


def test_a_rotated_token_works_through_the_overlap_and_is_refused_after_it(world: World) -> None:
    old = world.token("hooli")
    new, before = world.store.rotate("hooli", lifetime_seconds=HOUR, overlap_seconds=0.5)
    assert [r.id for r in before] == [world.minted["hooli"].record.id]
    assert world.get("/shares", old).json() == {"items": [{"name": "hooli"}]}
    assert world.get("/shares", new.token).json() == {"items": [{"name": "hooli"}]}
    time.sleep(0.6)
    assert world.get("/shares", old).status_code == 401
    assert world.get("/shares", new.token).status_code == 200
    world.minted["hooli"] = new


def test_revoking_refuses_the_token_and_its_file_urls_at_once(world: World) -> None:
    url = _file_urls(world, "hooli")[0]
    assert requests.get(url, timeout=10).status_code == 200
    world.store.revoke("hooli")
    assert world.get("/shares", world.token("hooli")).status_code == 401
    assert requests.get(url, timeout=10).status_code == 403
    world.mint("hooli")
    assert world.get("/shares", world.token("hooli")).status_code == 200


@pytest.mark.parametrize("suffix", ["", "/schemas", "/schemas/sales/tables", "/all-tables", "/schemas/sales/tables/orders/metadata",
                                    "/schemas/sales/tables/orders/version",
                                    "/schemas/sales/tables/orders/changes?startingVersion=0"])
def test_another_recipients_share_answers_exactly_as_a_missing_one(world: World, suffix: str) -> None:
    token = world.token("acme")
    for share in ("globex", "GLOBEX", "nosuch"):
        answer = world.get(f"/shares/{share}{suffix}", token)
        assert (answer.status_code, answer.json()) == (404, NOT_FOUND)
    assert world.post("/shares/globex/schemas/sales/tables/orders/query", token, {}).json() == NOT_FOUND
    for path in ("/shares/acme/schemas/default/tables", "/shares/acme/schemas/sales/tables/customers/metadata",
                 "/shares/acme/schemas/default/tables/orders/version"):
        assert world.get(path, token).json() == NOT_FOUND


TRAVERSALS = ["..", "%2e%2e", "..%2F..%2Fglobex", "..%2F..%2F..%2F..%2Fetc%2Fpasswd", "acme%2F..%2Fglobex",
              "..%5C..%5Cglobex", "%00", "acme%00", ".", "~", "%252e%252e%252f"]


@pytest.mark.parametrize("position", ["share", "schema", "table"])
def test_path_traversal_in_every_path_parameter_finds_nothing(world: World, position: str) -> None:
    names = {"share": "acme", "schema": "sales", "table": "orders"}
    for bad in TRAVERSALS:
        for route in ("/metadata", "/version", "/changes?startingVersion=0"):
            path = "/delta-sharing" + T.format(**(names | {position: bad})) + route
            status, body = world.raw_get(path, world.token("acme"))
            assert status == 404, (path, status, body)
            assert b"globex" not in body and str(world.root).encode() not in body and b"passwd" not in body
    for bad in TRAVERSALS:
        status, body = world.raw_get(f"/delta-sharing/shares/{bad}/all-tables", world.token("acme"))
        assert status == 404 and b"globex" not in body


def test_a_file_path_never_leaves_the_signed_urls(world: World) -> None:
    for bad in ("..%2F..%2Fout%2Fglobex%2Forders%2F_delta_log%2F00000000000000000000.json", "..", "%2e%2e%2f%2e%2e"):
        status, body = world.raw_get(f"/delta-sharing/files/{bad}")
        assert status in (403, 404) and body in (b"", b'{"errorCode":"RESOURCE_DOES_NOT_EXIST","message":"No such API."}')


SOURCE_FILE = "../../../src/orders/part-0.parquet"  # from a globex table's folder: the source, every tenant's rows


def test_tampered_forged_and_expired_file_urls_are_a_bare_403(world: World) -> None:
    url = _file_urls(world, "globex")[0]
    segment, base = _segment(url), url.rsplit("/", 1)[0]
    grant = FileGrant(**_payload(segment))
    real = (world.root / "out/globex/orders" / grant.path).read_bytes()
    assert (world.root / "out/globex/orders" / SOURCE_FILE).resolve().is_file()
    assert requests.get(url, timeout=10).content == real
    payload, _, mac = segment.partition(".")
    now_ms = int(time.time() * 1000)
    signer = world.service.signer
    tampered = [
        f"{payload}.{mac[:-2]}{'AB' if mac[-2:] != 'AB' else 'CD'}",
        _with_payload(segment, _payload(segment) | {"path": SOURCE_FILE}),
        _with_payload(segment, _payload(segment) | {"expires_ms": now_ms + 10 * HOUR * 1000}),
        _with_payload(segment, _payload(segment) | {"recipient": "acme", "share": "acme"}),
        segment[:-5], payload, "x." + mac, "",
        UrlSigner(b"k" * 32).sign(grant),  # signed with another key
        signer.sign(replace(grant, expires_ms=now_ms - 1)),  # expired
        signer.sign(replace(grant, path=SOURCE_FILE)),  # a path leaving the table's folder, validly signed
        signer.sign(replace(grant, path="%2E%2E/%2E%2E/%2E%2E/src/orders/part-0.parquet")),
        signer.sign(replace(grant, token_id="tok_000000000000")),  # a token that never was
    ]
    for bad in tampered:
        answer = requests.get(f"{base}/{bad}", timeout=10)
        assert (answer.status_code, answer.content) in ((403, b""), (404, answer.content)) and answer.status_code != 200
        assert str(world.root) not in answer.text
    assert requests.get(f"{base}/{signer.sign(replace(grant, expires_ms=now_ms + 60_000))}", timeout=10).content == real


def test_a_table_stamped_for_another_recipient_is_not_served(world: World, tmp_path: Path) -> None:
    """The configuration points globex at acme's folder: the owner stamp keeps acme's rows from globex."""
    doc = yaml.safe_load(world.config.read_text())
    doc["recipients"] = [r for r in doc["recipients"] if r["id"] != "acme"]
    doc["destinations"] = [d | {"path": str(world.root / d["path"])} for d in doc["destinations"] if d["name"] != "acme_delta"]
    doc["destinations"][0]["path"] = str(world.root / "out/acme")
    doc["sources"][0]["path"] = str(world.root / "src")
    moved = tmp_path / "incsync.yaml"
    moved.write_text(yaml.safe_dump(doc))
    service = build_service(moved)
    caller = Caller(recipient="globex", token_id="tok_test")
    table = service.table(caller, "globex", "sales", "orders")
    with pytest.raises(ProtocolError) as refused:
        table_metadata(service, caller, table, {}, None)
    assert (refused.value.status, refused.value.message) == (404, NOT_FOUND["message"])


def test_no_token_or_signed_url_reaches_a_log_or_another_answer(world: World, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        answers = [world.get("/shares", world.token("acme")), world.get("/shares/globex", world.token("acme")),
                   world.get("/shares", world.token("acme") + "x"), world.get("/shares/acme/all-tables", world.token("acme"))]
        urls = _file_urls(world, "acme")
        answers += [requests.get(u, timeout=10) for u in urls]
        answers.append(requests.get(urls[0] + "x", timeout=10))
    secrets = [m.token for m in world.minted.values()] + [_segment(u) for u in urls] + [_segment(u).partition(".")[2] for u in urls]
    logged = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("urllib3"))  # the server's, not the client's
    assert "recipient=acme" in logged and "/delta-sharing/files/..." in logged  # the access log did log them
    assert [s for s in secrets if s in logged] == []
    texts = [a.text for a in answers if a.headers.get("content-type", "").startswith("application/json")]
    assert len(texts) == 4 and [t for t in (m.token for m in world.minted.values()) if any(t in x for x in texts)] == []
    assert b"incsync_st_" not in world.store.path.read_bytes()

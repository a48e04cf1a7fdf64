"""The protocol's details the official Python client does not exercise: paging, the deprecated HEAD version,
response formats and the capabilities header, the file id hash header, streaming queries from a version and
malformed requests. The `delta` format is checked by rebuilding a Delta table from its lines."""

from __future__ import annotations

import json
from pathlib import Path

import requests
from deltalake import DeltaTable

from incsync_tests.sharing.conftest import DAY1, World

Q = "/shares/globex/schemas/sales/tables/orders"


def test_list_calls_page_by_max_results_and_their_token(world: World) -> None:
    token = world.token("globex")
    first = world.get("/shares", token, params={"maxResults": 0}).json()
    assert first["items"] == [] and first["nextPageToken"]
    second = world.get("/shares", token, params={"maxResults": 1, "pageToken": first["nextPageToken"]}).json()
    assert second == {"items": [{"name": "globex"}]}
    assert world.get("/shares/globex/schemas", token).json() == {"items": [{"name": "sales", "share": "globex"}]}
    for bad in ({"maxResults": -1}, {"maxResults": "ten"}, {"pageToken": "garbage!"}):
        answer = world.get("/shares", token, params=bad)
        assert answer.status_code == 400 and answer.json()["errorCode"] == "INVALID_PARAMETER_VALUE"


def test_the_table_version_answers_in_a_header_by_get_and_by_the_deprecated_head(world: World) -> None:
    token = world.token("globex")
    version = world.get(Q + "/version", token).headers["delta-table-version"]
    assert version == "1"  # the stamped empty table, then the backfill
    head = requests.head(world.endpoint + Q, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert (head.status_code, head.headers["delta-table-version"]) == (200, version)


def test_metadata_answers_in_the_format_the_client_takes(world: World) -> None:
    token = world.token("globex")
    plain = world.get(Q + "/metadata", token)
    assert plain.headers["content-type"] == "application/x-ndjson; charset=utf-8"
    protocol, metadata = (json.loads(line) for line in plain.text.splitlines())
    assert protocol == {"protocol": {"minReaderVersion": 1}}
    assert metadata["metaData"]["format"] == {"provider": "parquet"} and metadata["metaData"]["partitionColumns"] == []
    assert [f["name"] for f in json.loads(metadata["metaData"]["schemaString"])["fields"]] == [
        "id", "organization_id", "status", "amount", "updated_at"]
    assert metadata["metaData"]["configuration"] == {"delta.targetFileSize": "4194304"}  # the owner stamp stays home
    delta = world.get(Q + "/metadata", token, headers={"delta-sharing-capabilities": "responseformat=delta"})
    assert delta.headers["delta-sharing-capabilities"] == "responseformat=delta"
    protocol, metadata = (json.loads(line) for line in delta.text.splitlines())
    assert protocol == {"protocol": {"deltaProtocol": {"minReaderVersion": 1, "minWriterVersion": 2}}}
    assert set(metadata["metaData"]["deltaMetadata"]) >= {"id", "format", "schemaString", "partitionColumns"}


def test_a_delta_format_answer_rebuilds_the_table(world: World, tmp_path: Path) -> None:
    """Its lines, written as a Delta log over the files its URLs serve, read back as the recipient's rows."""
    answer = requests.post(world.endpoint + Q + "/query", json={}, timeout=10, headers={
        "Authorization": f"Bearer {world.token('globex')}", "delta-sharing-capabilities": "responseformat=delta"})
    lines = [json.loads(line) for line in answer.text.splitlines()]
    (tmp_path / "_delta_log").mkdir()
    log = [{"protocol": lines[0]["protocol"]["deltaProtocol"]}, {"metaData": lines[1]["metaData"]["deltaMetadata"]}]
    for n, line in enumerate(lines[2:]):
        add = line["file"]["deltaSingleAction"]["add"]
        (tmp_path / f"f{n}.parquet").write_bytes(requests.get(add["path"], timeout=10).content)
        log.append({"add": add | {"path": f"f{n}.parquet"}})
    (tmp_path / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in log))
    rows = DeltaTable(str(tmp_path)).to_pyarrow_table().to_pylist()
    assert [(r["id"], r["status"]) for r in rows] == [(r["id"], r["status"]) for r in DAY1 if r["organization_id"] == "org_2"]


def test_a_query_from_a_version_lists_each_versions_added_files(world: World) -> None:
    lines = world.query_lines("globex", {"startingVersion": 0})
    assert [next(iter(line)) for line in lines] == ["protocol", "metaData", "add"]
    add = lines[2]["add"]
    assert (add["version"], add["size"], json.loads(add["stats"])["numRecords"]) == (1, add["size"], 1)
    assert add["timestamp"] > 0 and add["expirationTimestamp"] > add["timestamp"]
    assert world.query_lines("globex", {"startingVersion": 1, "endingVersion": 1})[2]["add"]["id"] == add["id"]


def test_a_snapshot_lists_its_files_with_stable_ids_and_the_version_it_pinned(world: World) -> None:
    first, second = world.query_lines("globex"), world.query_lines("globex", {"version": 1})
    assert [line["file"]["id"] for line in first[2:]] == [line["file"]["id"] for line in second[2:]]
    assert "version" not in first[2]["file"] and second[2]["file"]["version"] == 1
    assert first[2]["file"]["url"] != "" and first[2]["file"]["partitionValues"] == {}


def test_malformed_requests_are_400_naming_the_mistake(world: World) -> None:
    token = world.token("globex")
    headers = {"Authorization": f"Bearer {token}"}
    cases = [
        (requests.post(world.endpoint + Q + "/query", data="{not json", headers=headers, timeout=10), "MALFORMED_REQUEST"),
        (requests.post(world.endpoint + Q + "/query", json=[1], headers=headers, timeout=10), "MALFORMED_REQUEST"),
        (world.post(Q + "/query", token, {"version": 1, "timestamp": "2024-01-01T00:00:00Z"}), "INVALID_PARAMETER_VALUE"),
        (world.post(Q + "/query", token, {"version": "one"}), "INVALID_PARAMETER_VALUE"),
        (world.post(Q + "/query", token, {"timestamp": "yesterday"}), "INVALID_PARAMETER_VALUE"),
        (world.post(Q + "/query", token, {"timestamp": "2000-01-01T00:00:00Z"}), "INVALID_PARAMETER_VALUE"),
        (world.get(Q + "/changes", token), "INVALID_PARAMETER_VALUE"),
        (world.get(Q + "/metadata", token, headers={"fileidhash": "md5"}), "INVALID_PARAMETER_VALUE"),
        (world.get(Q + "/metadata", token, headers={"delta-sharing-capabilities": "responseformat=avro"}),
         "UNSUPPORTED_OPERATION"),
    ]
    assert [(a.status_code, a.json()["errorCode"]) for a, _ in cases] == [(400, code) for _, code in cases]
    echoed = world.get(Q + "/metadata", token, headers={"fileidhash": "Delta"})
    assert echoed.headers["fileidhash"] == "delta"
    assert world.get("/nothing/here", token).status_code == 404

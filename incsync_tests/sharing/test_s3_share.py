"""A recipient's Delta copy on S3 (the moto server the tests start) through Delta Sharing: the official client reads
exactly its rows, past versions and changes too, from URLs pre-signed with the destination's own key (as botocore
signs them), which expire; the server's file endpoint never serves them and no secret reaches an answer or the log."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import delta_sharing
import pytest
import requests
import yaml

from incsync.config.load import load_config
from incsync.sharing import delta_log
from incsync.sharing.presign import presigned_get
from incsync.sharing.server import ServerThread, build_service, profile, token_store, write_profile
from incsync_tests.sharing.conftest import HOUR
from incsync_tests.support import arrow_transfer
from incsync_tests.support.host import free_port
from incsync_tests.support.lake import lake_config, order, ts, write_table
from incsync_tests.support.s3 import SECRET

DAY1 = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2), amount=2.5), order(3, "org_2", ts(1, 3))]
DAY2 = [order(1, "org_1", ts(2, 1), status="paid"), *DAY1[1:], order(4, "org_1", ts(2, 3))]


def _rows(frame) -> list[tuple[int, str]]:  # noqa: ANN001 - a pandas frame
    return sorted(zip(frame["id"].astype(int), frame["status"], strict=True))


def test_a_delta_copy_on_s3_is_read_through_presigned_urls(s3, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bucket = s3.bucket()
    write_table(tmp_path / "src", "orders", DAY1)
    config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_s3"}],
                         destinations=[{"name": "acme_s3", "kind": "delta", "path": f"s3://{bucket}/acme",
                                        "storage_options": s3.options(), "change_data_feed": True}])
    port = free_port()
    doc = yaml.safe_load(config.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}, "url_lifetime_seconds": 60}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_config(config)

    def transfer(window: str, scheduled: bool) -> None:
        arrow_transfer.run(config, window, scheduled=scheduled, recipient_id="acme", staging_root=tmp_path / "staging")

    transfer("2024-01-01", False)
    root = f"s3://{bucket}/acme/orders"
    options = {k.removesuffix("_env"): (SECRET if k.endswith("_env") else v) for k, v in s3.options().items()}
    first = delta_log.latest_version(root, options=options)
    minted = token_store(config, loaded.sharing).create("acme", lifetime_seconds=HOUR)
    write_profile(tmp_path / "acme.share", profile(loaded.sharing, minted))
    url = f"{tmp_path / 'acme.share'}#acme.sales.orders"
    with caplog.at_level(logging.INFO, logger="incsync.sharing"), ServerThread(build_service(config, loaded), port=port):
        assert delta_sharing.SharingClient(str(tmp_path / "acme.share")).list_all_tables()[0].name == "orders"
        assert _rows(delta_sharing.load_as_pandas(url)) == [(1, "new"), (2, "new")]
        write_table(tmp_path / "src", "orders", DAY2)
        transfer("2024-01-02", True)
        second = delta_log.latest_version(root, options=options)
        assert _rows(delta_sharing.load_as_pandas(url)) == [(1, "paid"), (2, "new"), (4, "new")]
        assert _rows(delta_sharing.load_as_pandas(url, version=first)) == [(1, "new"), (2, "new")]
        changes = delta_sharing.load_table_changes_as_pandas(url, starting_version=second, ending_version=second)
        assert sorted(zip(changes["id"].astype(int), changes["_change_type"], strict=True)) == [
            (1, "update_postimage"), (1, "update_preimage"), (4, "insert")]

        answer = requests.post(f"http://127.0.0.1:{port}/delta-sharing/shares/acme/schemas/sales/tables/orders/query",
                               headers={"Authorization": f"Bearer {minted.token}"}, json={}, timeout=10)
        files = [line for line in answer.text.splitlines() if line.startswith('{"file"')]
        assert files and SECRET not in answer.text and minted.token not in answer.text
        signed = [requests.utils.unquote(line.split('"url":"', 1)[1].split('"', 1)[0]) for line in files]
        for file_url in signed:
            parts = urlsplit(file_url)
            assert f"{parts.scheme}://{parts.netloc}" == s3.endpoint and parts.path.startswith(f"/{bucket}/acme/orders/")
            query = parse_qs(parts.query)
            assert query["X-Amz-Expires"] == ["60"] and query["X-Amz-Credential"][0].startswith("testing/")
            assert requests.get(file_url, timeout=10).status_code == 200  # the bucket serves it, not the server
        # the server's own file endpoint knows nothing of an S3 table's files
        assert requests.get(f"http://127.0.0.1:{port}/delta-sharing/files/{parts.path}", timeout=10).status_code in (403, 404)
    assert SECRET not in caplog.text and minted.token not in caplog.text


def test_presigned_urls_are_signed_as_botocore_signs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    import botocore.auth
    from botocore.config import Config

    when = datetime(2026, 11, 28, 12, 30, 5, tzinfo=timezone.utc)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when.replace(tzinfo=None))
    for endpoint, token in (("http://127.0.0.1:9000", None), (None, "a-session-token")):
        options = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG", "aws_region": "eu-west-1",
                   **({"aws_endpoint_url": endpoint} if endpoint else {}), **({"aws_session_token": token} if token else {})}
        client = boto3.client("s3", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="wJalrXUtnFEMI/K7MDENG",
                              aws_session_token=token, region_name="eu-west-1", endpoint_url=endpoint,
                              config=Config(signature_version="s3v4", s3={"addressing_style": "path" if endpoint else "virtual"}))
        key = "acme/orders/part-00001-a b=c.snappy.parquet"
        theirs = client.generate_presigned_url("get_object", Params={"Bucket": "shares", "Key": key}, ExpiresIn=900)
        ours = presigned_get(f"s3://shares/{key}", options, expires_seconds=900, now=when)
        assert urlsplit(ours)._replace(query="") == urlsplit(theirs)._replace(query="")
        assert parse_qs(urlsplit(ours).query) == parse_qs(urlsplit(theirs).query)

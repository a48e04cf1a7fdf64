"""Signed manifests: Ed25519 `signature` and `signature_public_key`; read_manifested(public_key=...)
verifies them and each file's sha256, and fails loudly on a tampered manifest or data file."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from incsync import read_manifested
from incsync.destinations.errors import ManifestIntegrityError
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import lake_config, materialize_partition, order, ts, write_table


@pytest.fixture
def signed_prefix(spark, dagster_instance, tmp_path: Path, monkeypatch) -> tuple[Path, bytes]:
    key = Ed25519PrivateKey.generate()
    key_file = tmp_path / "signing.pem"
    key_file.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    monkeypatch.setenv("INCSYNC_TEST_SIGNING_KEY", str(key_file))
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(1, 11))])
    destinations = [{"name": "acme_files", "kind": "object_storage", "path": "./out/files",
                     "signing_key_env": "INCSYNC_TEST_SIGNING_KEY"}]
    recipients = [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_files"}]
    defs = build_definitions(lake_config(tmp_path, recipients=recipients, destinations=destinations))
    materialize_partition(defs, dagster_instance, window="2024-01-01", recipient="acme")
    return tmp_path / "out/files", key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _manifest(root: Path) -> Path:
    return next((root / "_manifests/orders").glob("dt=*/manifest_*.json"))


def test_a_signed_manifest_verifies_and_reads(signed_prefix) -> None:
    root, public = signed_prefix
    manifest = json.loads(_manifest(root).read_text())
    assert base64.b64decode(manifest["signature_public_key"]) == public and len(base64.b64decode(manifest["signature"])) == 64
    assert [r["id"] for r in read_manifested(root, "orders", "acme", public_key=public).to_pylist()] == [1, 2]
    assert read_manifested(root, "orders", "acme", public_key=manifest["signature_public_key"]).num_rows == 2


def test_a_tampered_manifest_fails_loudly(signed_prefix) -> None:
    root, public = signed_prefix
    path = _manifest(root)
    manifest = json.loads(path.read_text())
    manifest["rows_transferred"] = 99
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestIntegrityError, match="signature does not verify"):
        read_manifested(root, "orders", "acme", public_key=public)


def test_a_tampered_data_file_fails_loudly(signed_prefix) -> None:
    root, public = signed_prefix
    data = root / json.loads(_manifest(root).read_text())["files"][0]["data_file_key"]
    table = pq.read_table(data)
    pq.write_table(table.set_column(2, "status", pa.array(["forged"] * table.num_rows)), data)
    with pytest.raises(ManifestIntegrityError, match=r"sha256 [0-9a-f]{64} differs from the signed"):
        read_manifested(root, "orders", "acme", public_key=public)


def test_another_key_is_refused(signed_prefix) -> None:
    root, _ = signed_prefix
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    with pytest.raises(ManifestIntegrityError, match="signed by another key"):
        read_manifested(root, "orders", "acme", public_key=other)

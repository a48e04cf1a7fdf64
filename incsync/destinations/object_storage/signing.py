"""Signed manifests (Ed25519): ``signature`` and ``signature_public_key`` as Prequel's manifests carry them.

The signature covers the manifest's canonical JSON (sorted keys, compact separators) without the
``signature`` field itself, so it covers every data file's ``sha256_checksum``: a reader that verifies
the signature and then each file's checksum knows every byte it reads was published by the key's owner.
The private key is a PEM file whose path is in the environment variable the destination names
(``signing_key_env``); the key itself is never in the configuration.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.destinations.errors import ManifestIntegrityError
from incsync.errors import ConfigError

if TYPE_CHECKING:
    from incsync.storage.files import Store


def _canonical(manifest: dict) -> bytes:
    body = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def load_private_key(env_var: str, *, destination: str):  # noqa: ANN201 - an Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    path = os.environ.get(env_var)
    where = f"destinations[{destination}].signing_key_env"
    if not path:
        raise ConfigError("environment", [f"{where}: variable {env_var} is not set; export the path of an Ed25519 PEM key file in it"])
    try:
        key = load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise ConfigError("environment", [f"{where}: the file named by ${env_var} is not a readable unencrypted PEM private key "
                                          f"({type(exc).__name__})"]) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("environment", [f"{where}: the key named by ${env_var} is not an Ed25519 key"])
    return key


def public_key_text(key) -> str:  # noqa: ANN001 - an Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def sign_manifest(manifest: dict, key) -> dict:  # noqa: ANN001 - an Ed25519PrivateKey
    signed = {**manifest, "signature_public_key": public_key_text(key)}
    signed["signature"] = base64.b64encode(key.sign(_canonical(signed))).decode()
    return signed


def _public_key(value: str | bytes):  # noqa: ANN202 - an Ed25519PublicKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    raw = value.encode() if isinstance(value, str) else value
    if raw.lstrip().startswith(b"-----BEGIN"):
        return load_pem_public_key(raw)
    if len(raw) != 32:
        raw = base64.b64decode(raw)
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_manifest(manifest: dict, public_key: str | bytes, *, store: Store) -> None:
    """Raise ManifestIntegrityError unless ``manifest`` is signed by ``public_key`` and every file it lists
    has its recorded sha256."""
    from cryptography.exceptions import InvalidSignature

    name = manifest.get("manifest_file_key", "?")
    if "signature" not in manifest:
        raise ManifestIntegrityError(
            f"manifest {name} is not signed, but a public key was given to verify it: its publisher does not sign "
            "(set signing_key_env on the destination) or the signature was removed; do not read it"
        )
    key = _public_key(public_key)
    try:
        key.verify(base64.b64decode(manifest["signature"]), _canonical(manifest))
    except (InvalidSignature, ValueError):
        raise ManifestIntegrityError(
            f"manifest {name}: its signature does not verify with the given public key: the manifest was changed "
            "after publishing, or signed by another key; do not read it"
        ) from None
    for entry in [*manifest.get("files", []), *manifest.get("delete_files", [])]:
        digest = store.sha256(entry["data_file_key"])
        if digest != entry["sha256_checksum"]:
            raise ManifestIntegrityError(
                f"data file {entry['data_file_key']} of manifest {name}: sha256 {digest} differs from the "
                f"signed {entry['sha256_checksum']}: the file was changed after publishing; do not read it"
            )

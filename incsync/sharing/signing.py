"""Short-lived signed URLs for the files of a locally stored table: what S3 pre-signing is to an S3 table.

A URL names one file of one shared table for one recipient, the token that asked for it, and an expiry, under
an HMAC-SHA256 of all of it. The file endpoint serves it only while the signature holds, the expiry is ahead,
the token is still live and the table is still in the recipient's share; anything else is one bare 403.
The same signer, under keys derived per purpose, signs the Iceberg catalog's storage credentials.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

MAX_URL_TOKEN = 4096


class Expiring(Protocol):
    @property
    def expires_ms(self) -> int: ...


G = TypeVar("G", bound=Expiring)


@dataclass(frozen=True)
class FileGrant:
    """What one signed file URL allows."""

    recipient: str
    token_id: str
    share: str
    schema: str
    table: str
    path: str  # the file, relative to the table's root, as the Delta log spells it
    expires_ms: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class UrlSigner:
    """Signs and checks file grants with one key shared by every server process."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a file-URL signing key needs at least 32 bytes")
        self._key = key

    def sign(self, grant: Any) -> str:
        """The URL path segment carrying ``grant`` (a FileGrant, or another dataclass with ``expires_ms``)."""
        payload = _b64(json.dumps(asdict(grant), separators=(",", ":"), sort_keys=True).encode())
        return f"{payload}.{self.mac(payload)}"

    def verify(self, token: str, *, now_ms: int) -> FileGrant | None:
        """The file grant ``token`` carries when its signature holds and it has not expired; else None."""
        return self.verify_as(token, now_ms=now_ms, kind=FileGrant)

    def verify_as(self, token: str, *, now_ms: int, kind: type[G]) -> G | None:
        """The grant of type ``kind`` ``token`` carries when its signature holds and it has not expired; else None."""
        payload, dot, mac = token.partition(".")
        if not dot or len(token) > MAX_URL_TOKEN or not hmac.compare_digest(mac.encode(), self.mac(payload).encode()):
            return None
        try:
            grant = kind(**json.loads(_unb64(payload)))
        except (ValueError, TypeError, binascii.Error):
            return None
        return grant if now_ms < grant.expires_ms else None

    def derive(self, purpose: str) -> UrlSigner:
        """A signer with a key of its own for ``purpose``: what one signs, another never accepts."""
        return UrlSigner(hmac.new(self._key, purpose.encode(), hashlib.sha256).digest())

    def mac(self, text: str) -> str:
        """The key's HMAC-SHA256 of ``text``, base64url without padding."""
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())

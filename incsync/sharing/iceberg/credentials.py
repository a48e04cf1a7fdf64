"""Storage credentials vended with a table, and checking them on the way back: the server's own short-lived,
table-scoped S3 credentials for the S3-compatible endpoint that serves a local table's data files.

The session token is a signed grant (recipient, bearer token id, table, expiry) under a key of its own; the
secret access key is derived from it, so the server stores nothing per credential. A file request must carry
the session token and an AWS Signature V4 made with that secret: the token alone reads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from incsync.sharing.catalog import SharedTable
from incsync.sharing.iceberg import sigv4
from incsync.sharing.protocol import Caller
from incsync.sharing.signing import UrlSigner

BUCKET = "shares"  # the one bucket of the endpoint; a key starts with share/schema/table
REGION = "us-east-1"  # any region signs alike; naming one keeps clients from asking AWS where the bucket is


@dataclass(frozen=True)
class TableGrant:
    """What one set of vended credentials reads: the data files of one table of one recipient's share."""

    recipient: str
    token_id: str
    share: str
    schema: str
    table: str
    expires_ms: int
    purpose: str = "iceberg-s3"


def table_prefix(share: str, schema: str, table: str) -> str:
    """The key prefix of a table's files in the endpoint's bucket (names as the share lists them)."""
    return f"{share}/{schema}/{table}/"


class CredentialVendor:
    """Mints and checks the credentials of one server (its signing key, derived for this purpose)."""

    def __init__(self, signer: UrlSigner, *, endpoint: str, lifetime_seconds: int) -> None:
        self._tokens = signer.derive("iceberg storage credentials: session tokens")
        self._secrets = signer.derive("iceberg storage credentials: secret keys")
        self.endpoint = endpoint
        self.lifetime_seconds = lifetime_seconds

    def location(self, table: SharedTable) -> str:
        """Where a reader sees ``table``'s files: ``s3://shares/<share>/<schema>/<table>``."""
        return f"s3://{BUCKET}/{table_prefix(table.share, table.schema, table.name)}".rstrip("/")

    def config(self) -> dict[str, str]:
        """The FileIO settings of every table (no secret): the endpoint, path-style addressing and the region."""
        return {"s3.endpoint": self.endpoint, "s3.path-style-access": "true", "s3.force-virtual-addressing": "false",
                "s3.region": REGION, "client.region": REGION}

    def vend(self, caller: Caller, table: SharedTable, *, now: float) -> dict[str, object]:
        """One ``storage-credentials`` entry: the credentials reading ``table``'s files until they expire."""
        expires_ms = int((now + self.lifetime_seconds) * 1000)
        grant = TableGrant(recipient=caller.recipient, token_id=caller.token_id, share=table.share, schema=table.schema,
                           table=table.name, expires_ms=expires_ms)
        session = self._tokens.sign(grant)
        return {"prefix": self.location(table) + "/", "config": {
            "s3.access-key-id": caller.token_id, "s3.secret-access-key": self._secrets.mac(session),
            "s3.session-token": session, "s3.session-token-expires-at-ms": str(expires_ms)}}

    def check(self, *, method: str, path: str, query: str, headers: dict[str, str], now: float) -> TableGrant | None:
        """The grant of a signed request for a file: its session token valid and unexpired, its signature made
        with the secret of that token; else None."""
        signed = sigv4.parse(headers.get("authorization"))
        session = headers.get("x-amz-security-token", "")
        if signed is None or not session or "x-amz-security-token" not in signed.headers:
            return None
        grant = self._tokens.verify_as(session, now_ms=int(now * 1000), kind=TableGrant)
        if grant is None or grant.purpose != "iceberg-s3" or signed.access_key != grant.token_id:
            return None
        ok = sigv4.verify(signed, secret=self._secrets.mac(session), method=method, path=path, query=query,
                          headers=headers, now=now)
        return grant if ok else None

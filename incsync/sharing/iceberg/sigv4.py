"""Checking an AWS Signature Version 4 on a request, as an S3 server does: the header form (``Authorization:
AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...``) that S3 clients send.

Pure functions over what the request carries; the caller knows the secret behind the access key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import parse_qsl, quote

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_SKEW_SECONDS = 15 * 60  # S3's own limit on a request's clock
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-f]{64})\s*$")


@dataclass(frozen=True)
class Signed:
    """What an Authorization header says: who signed, for which day, region and service, over which headers."""

    access_key: str
    day: str
    region: str
    service: str
    headers: tuple[str, ...]
    signature: str


def parse(authorization: str | None) -> Signed | None:
    match = _AUTHORIZATION.match(authorization or "")
    if match is None:
        return None
    scope = match.group(1).split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return None
    return Signed(access_key=scope[0], day=scope[1], region=scope[2], service=scope[3],
                  headers=tuple(match.group(2).split(";")), signature=match.group(3))


def _canonical_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature(signed: Signed, *, secret: str, method: str, path: str, query: str, headers: dict[str, str],
              amz_date: str) -> str:
    """The signature the request should carry. ``path``: as sent (S3 signs it encoded once, as it is);
    ``headers``: lower-case names, each name's values joined by commas."""
    canonical_headers = "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed.headers)
    payload = headers.get("x-amz-content-sha256", EMPTY_SHA256)
    request = "\n".join([method, path, _canonical_query(query), canonical_headers, ";".join(signed.headers), payload])
    scope = f"{signed.day}/{signed.region}/{signed.service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(request.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret).encode(), signed.day), signed.region), signed.service), "aws4_request")
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def verify(signed: Signed, *, secret: str, method: str, path: str, query: str, headers: dict[str, str],
           now: float) -> bool:
    """Whether the request carries ``secret``'s signature over its method, path, query and signed headers (the
    host among them), made within ``MAX_SKEW_SECONDS`` of ``now`` on the day its scope names."""
    amz_date = headers.get("x-amz-date", "")
    if "host" not in signed.headers or signed.service != "s3" or not amz_date.startswith(signed.day):
        return False
    try:
        made = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return False
    if abs(now - made) > MAX_SKEW_SECONDS:
        return False
    expected = signature(signed, secret=secret, method=method, path=path, query=query, headers=headers, amz_date=amz_date)
    return hmac.compare_digest(expected, signed.signature)

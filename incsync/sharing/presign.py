"""Pre-signed S3 URLs (AWS Signature Version 4 in the query string) for the data files of a shared Delta table on
S3: what a Delta Sharing answer hands out for such a table, read by the recipient straight from the bucket.

Signed with the destination's own credentials (its ``storage_options``: key, secret, session token, region and
endpoint, in delta-rs's names); a URL allows one ``GET`` of one object until it expires. S3 cannot revoke a
pre-signed URL: a revoked token stops new answers, the URLs already handed out run to their expiry.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime, timezone
from urllib.parse import quote, urlsplit

from incsync.sharing.errors import SharingError

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_EXPIRES = 7 * 24 * 3600  # S3's limit on a pre-signed URL


def _pick(options: Mapping[str, str], *names: str) -> str | None:
    return next((options[n] for n in names if options.get(n)), None)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _quote(text: str) -> str:
    return quote(text, safe="-_.~")


def presigned_get(url: str, options: Mapping[str, str] | None, *, expires_seconds: int, now: datetime | None = None) -> str:
    """A URL reading the object ``url`` (``s3://bucket/key``) for ``expires_seconds``. With an endpoint in the
    options (an S3-compatible server) the URL is path-style on it, else virtual-hosted on AWS."""
    options = {k.lower(): v for k, v in (options or {}).items()}
    access_key = _pick(options, "aws_access_key_id", "access_key_id")
    secret = _pick(options, "aws_secret_access_key", "secret_access_key")
    if not access_key or not secret:
        raise SharingError("a Delta table on S3 is shared through pre-signed URLs, which need the destination's "
                           "storage_options to hold aws_access_key_id and aws_secret_access_key(_env)")
    token = _pick(options, "aws_session_token", "session_token", "aws_token", "token")
    region = _pick(options, "aws_region", "region", "aws_default_region") or "us-east-1"
    parts = urlsplit(url)
    bucket, key = parts.netloc, parts.path.lstrip("/")
    endpoint = _pick(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
    if endpoint:
        base = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        scheme, host = base.scheme, base.netloc
        path = f"{base.path.rstrip('/')}/{bucket}/{key}"
    else:
        scheme, host, path = "https", f"{bucket}.s3.{region}.amazonaws.com", f"/{key}"
    path = quote(path, safe="/-_.~")
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    day, stamp = when.strftime("%Y%m%d"), when.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{day}/{region}/s3/aws4_request"
    query = {"X-Amz-Algorithm": ALGORITHM, "X-Amz-Credential": f"{access_key}/{scope}", "X-Amz-Date": stamp,
             "X-Amz-Expires": str(min(expires_seconds, MAX_EXPIRES)), "X-Amz-SignedHeaders": "host"}
    if token:
        query["X-Amz-Security-Token"] = token
    canonical_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))
    request = "\n".join(["GET", path, canonical_query, f"host:{host}\n", "host", UNSIGNED_PAYLOAD])
    to_sign = "\n".join([ALGORITHM, stamp, scope, hashlib.sha256(request.encode()).hexdigest()])
    signing_key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret).encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{scheme}://{host}{path}?{canonical_query}&X-Amz-Signature={signature}"

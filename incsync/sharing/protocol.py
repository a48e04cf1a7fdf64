"""The protocol's plumbing shared by its endpoints: who calls, what an answer is, the errors it may give, and
the parsing of its parameters (page tokens, versions, timestamps, the capabilities header)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

PREFIX = "/delta-sharing"
MAX_PAGE = 1000
VERSION_HEADER = "delta-table-version"
CAPABILITIES_HEADER = "delta-sharing-capabilities"
FILE_ID_HASH_HEADER = "fileidhash"
NDJSON = "application/x-ndjson; charset=utf-8"


class ProtocolError(Exception):
    """An answer other than 200: its status, the protocol's error code and a message that names no secret,
    and nothing of another recipient's."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def not_found() -> ProtocolError:
    """The one answer to a share, schema or table that does not exist *or* belongs to someone else: the same
    for both, so a recipient cannot learn another's names by guessing."""
    return ProtocolError(404, "RESOURCE_DOES_NOT_EXIST", "The share, schema or table does not exist or is not shared with you.")


def invalid(message: str) -> ProtocolError:
    return ProtocolError(400, "INVALID_PARAMETER_VALUE", message)


@dataclass(frozen=True)
class Caller:
    """The recipient a live bearer token stands for, and that token's id (never the token)."""

    recipient: str
    token_id: str


@dataclass
class Answer:
    """A 200 answer: a JSON object, NDJSON lines, or headers alone."""

    json: dict[str, Any] | None = None
    lines: list[dict[str, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def page(items: list[dict[str, Any]], params: dict[str, str]) -> dict[str, Any]:
    """``items`` paged by ``maxResults`` and ``pageToken`` as the protocol's list calls define them."""
    size = min(optional_int(params, "maxResults", default=MAX_PAGE), MAX_PAGE)
    start = 0
    if params.get("pageToken"):
        try:
            start = int(json.loads(base64.urlsafe_b64decode(params["pageToken"].encode() + b"==="))["offset"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise invalid("pageToken is not a token this server gave") from None
        if start < 0:
            raise invalid("pageToken is not a token this server gave")
    answer: dict[str, Any] = {"items": items[start:start + size]}
    if start + size < len(items):
        answer["nextPageToken"] = base64.urlsafe_b64encode(json.dumps({"offset": start + size}).encode()).decode().rstrip("=")
    return answer


def optional_int(params: dict[str, Any], name: str, *, default: int | None = None) -> int:
    value = params.get(name)
    if value is None:
        return default  # type: ignore[return-value]  # the callers that pass no default check for None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise invalid(f"{name} must be a non-negative integer")
    try:
        number = int(value)
    except ValueError:
        raise invalid(f"{name} must be a non-negative integer") from None
    if number < 0:
        raise invalid(f"{name} must be a non-negative integer")
    return number


def timestamp_ms(params: dict[str, Any], name: str) -> int | None:
    """An ISO 8601 time (``2022-01-01T00:00:00Z``; without a zone: UTC) as epoch milliseconds."""
    text = params.get(name)
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"{name} must be an ISO 8601 time such as 2022-01-01T00:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def flag(params: dict[str, Any], name: str) -> bool:
    value = params.get(name)
    return value is True or str(value).lower() == "true"


def capabilities(header: str | None) -> dict[str, list[str]]:
    """``responseformat=delta,parquet;readerfeatures=deletionvectors`` as {key: [values]}, all lower case."""
    found: dict[str, list[str]] = {}
    for part in (header or "").split(";"):
        key, _, values = part.partition("=")
        if key.strip():
            found[key.strip().lower()] = [v.strip().lower() for v in values.split(",") if v.strip()]
    return found


def response_format(header: str | None, protocol: dict[str, Any]) -> str:
    """``parquet`` when the client takes it and the table needs no reader feature, else ``delta``."""
    formats = capabilities(header).get("responseformat") or ["parquet"]
    if "parquet" in formats and protocol.get("minReaderVersion", 1) == 1:
        return "parquet"
    if "delta" in formats:
        return "delta"
    raise ProtocolError(400, "UNSUPPORTED_OPERATION", "This table needs a client that reads responseformat=delta.")

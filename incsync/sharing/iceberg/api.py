"""The Iceberg REST catalog's plumbing: where it is mounted, its error model, and its page tokens."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

PREFIX = "/iceberg"  # the catalog's URI is <public_url>/iceberg; the spec's routes start at /v1 below it
STORAGE = PREFIX + "/s3"  # the S3-compatible endpoint of the tables' data files
MAX_PAGE = 1000


class RestError(Exception):
    """An answer other than 2xx, in the spec's error model: a status, an exception type and a message that names
    no secret and nothing of another recipient's."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "code": self.status}}


def unauthenticated() -> RestError:
    return RestError(401, "NotAuthorizedException", "The bearer token is missing, wrong, expired or revoked.")


def no_such_namespace() -> RestError:
    """The one answer to a prefix, warehouse or namespace that does not exist *or* is someone else's."""
    return RestError(404, "NoSuchNamespaceException", "The namespace does not exist or is not shared with you.")


def no_such_table() -> RestError:
    """The one answer to a table that does not exist *or* is someone else's, whatever part of its path is wrong."""
    return RestError(404, "NoSuchTableException", "The table does not exist or is not shared with you.")


def read_only() -> RestError:
    return RestError(403, "ForbiddenException", "This catalog is read-only: it serves the tables shared with you and "
                                                "changes none of them.")


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def page(items: list[Any], params: dict[str, str]) -> tuple[list[Any], str | None]:
    """``items`` paged by ``pageSize`` and ``pageToken``; the page and the next page's token (None: the last)."""
    try:
        size = min(int(params.get("pageSize") or MAX_PAGE), MAX_PAGE)
        start = int(json.loads(base64.urlsafe_b64decode(params["pageToken"] + "==="))["offset"]) if params.get("pageToken") else 0
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad_request("pageSize must be a positive integer and pageToken a token this server gave") from None
    if size < 1 or start < 0:
        raise bad_request("pageSize must be a positive integer and pageToken a token this server gave")
    following = None
    if start + size < len(items):
        following = base64.urlsafe_b64encode(json.dumps({"offset": start + size}).encode()).decode().rstrip("=")
    return items[start:start + size], following

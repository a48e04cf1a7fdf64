"""What a JDBC error may show of its source: the URL without its query (which can hold credentials)."""

from __future__ import annotations


def url_without_query(url: str) -> str:
    return url.split("?", 1)[0]

"""Length limits for names, ids and tags: they become paths, PostgreSQL identifiers and run tags.

63 characters for anything used as a name or key (PostgreSQL truncates identifiers past 63 bytes, so two
longer names could silently become one table), 255 for a tenant value or a tag value.
"""

from __future__ import annotations

MAX_NAME_LENGTH = 63
MAX_VALUE_LENGTH = 255


def _shown(text: str) -> str:
    return f'"{text[:20]}…"' if len(text) > 24 else f'"{text}"'


def too_long(what: str, text: str, limit: int) -> str | None:
    """``what`` names the setting; the message never repeats a long value in full."""
    if len(text) <= limit:
        return None
    return f"{what} {_shown(text)} is {len(text)} characters long; the limit is {limit}: shorten it"


def tag_length_problem(key: str, value: str) -> str | None:
    """A tag key has at most 63 characters, a value at most 255."""
    return too_long("tag key", key, MAX_NAME_LENGTH) or too_long(f"tag {key[:20]} value", str(value), MAX_VALUE_LENGTH)

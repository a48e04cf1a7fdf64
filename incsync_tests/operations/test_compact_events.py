"""Compact event text (``dagster_compat.compact``): what is stored, what any reader gets back, and the dictionary
that every stored row needs staying the same."""

from __future__ import annotations

import hashlib

import pytest

from incsync.operations.dagster_compat.compact import MARK, compact, expand
from incsync.operations.dagster_compat.event_dictionary import V1


def test_compact_text_round_trips_and_json_passes_through() -> None:
    text = '{"__class__": "EventLogEntry", "user_message": "ü ✓ 😀 \\n \\u0000"}'
    stored = compact(text)
    assert stored.startswith(MARK) and stored.isascii()
    assert expand(stored) == text
    assert expand(text) == text  # Dagster's own events: JSON, as stored
    assert expand(None) is None


def test_a_corrupt_compact_value_fails_loudly() -> None:
    import zstandard

    with pytest.raises((zstandard.ZstdError, ValueError)):
        expand(MARK + "AAAA" + compact("{}")[len(MARK) + 4:])


def test_the_dictionary_never_changes() -> None:
    """Every row compressed with it needs these bytes to be read: a new dictionary is a new module and a new mark."""
    assert (MARK, len(V1), hashlib.sha256(V1).hexdigest()[:16]) == ("zs1:", 11359, "8084b12fe2c354ff")

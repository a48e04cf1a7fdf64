"""Errors of the staged batch."""

from __future__ import annotations

from incsync.errors import SchemaError


class ConversionError(SchemaError):
    """A source value that the column's faithful type cannot hold; nothing was published."""

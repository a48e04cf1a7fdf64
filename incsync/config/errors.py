"""The configuration package's own errors (the file's problems are ``incsync.errors.ConfigError``)."""

from __future__ import annotations

from incsync.errors import InputError


class TagError(InputError):
    """A user tag does not match the allowed pattern or shape."""

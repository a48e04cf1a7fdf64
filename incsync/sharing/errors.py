"""The sharing server's and the token store's errors."""

from __future__ import annotations

from incsync.errors import IncsyncError


class SharingError(IncsyncError):
    """A sharing command or the server's start cannot go on; the message names the recipient or setting and the fix."""


class Unavailable(SharingError):
    """A version, time or range a table cannot answer (too old, too new, no longer kept); the message names it."""

"""The command line's own errors. Standard library and ``incsync.errors`` only: every command imports this."""

from __future__ import annotations

from incsync.errors import InputError


class UsageError(InputError):
    """The command line itself is wrong (an unknown command or option, a missing argument)."""

"""The worker's errors. Standard library and ``incsync.errors`` only: the thin client imports this."""

from __future__ import annotations

from incsync.errors import IncsyncError


class WorkerError(IncsyncError):
    """The worker could not be reached, or refused or dropped the request."""

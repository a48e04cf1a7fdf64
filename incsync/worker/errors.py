"""The worker's errors. Standard library and ``incsync.errors`` only: the thin client imports this."""

from __future__ import annotations

from incsync.errors import IncsyncError


class WorkerError(IncsyncError):
    """The worker could not be reached, or refused or dropped the request."""


class NotStarted(WorkerError):
    """The worker could not be reached, or the connection ended before it began the transfer: nothing ran."""


class WorkerUnavailable(WorkerError):
    """No automatic worker could be used for this call (``incsync.worker.auto``): the caller runs the transfer itself."""

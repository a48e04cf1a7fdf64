"""Errors of the transfer engine."""

from __future__ import annotations

from incsync.errors import IncsyncError, PublishError


class TransferFailures(IncsyncError):
    """Recipients of one run failed: several, or one with an error that does not name it."""


class MassDeleteError(PublishError):
    """A transfer or repair would remove more of a recipient's rows than ``max_delete_fraction`` allows."""

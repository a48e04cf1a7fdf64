"""Errors of incsync in Dagster's definitions: an alert not delivered."""

from __future__ import annotations

from incsync.errors import IncsyncError


class AlertError(IncsyncError):
    """The webhook refused an alert or could not be reached."""

"""Errors of incsync in Dagster: what a run listing was asked that it cannot answer, an alert not delivered."""

from __future__ import annotations

from incsync.errors import IncsyncError, InputError


class StatusError(InputError):
    """An unknown transfer status was asked for."""


class AlertError(IncsyncError):
    """The webhook refused an alert or could not be reached."""

"""Errors of the operations on runs: what a run listing was asked that it cannot answer."""

from __future__ import annotations

from incsync.errors import InputError


class StatusError(InputError):
    """An unknown transfer status was asked for."""

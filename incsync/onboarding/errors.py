"""Onboarding's errors: the message names the recipient or setting and the fix, never a secret or a token."""

from __future__ import annotations

from incsync.errors import IncsyncError


class OnboardingError(IncsyncError):
    """An onboarding command or request cannot go on; one line naming the recipient or setting and the fix."""


class NotConfigured(OnboardingError):
    """The file lacks what onboarding writes to: the recipients table, the destinations table or the vault."""


class UnknownRecipient(OnboardingError):
    """The recipient is not in the recipients table."""

"""How the file's retry policy reads: retries of transient errors (re-exported by ``incsync.config.model``)."""

from __future__ import annotations

from pydantic import Field

from incsync.config.base import StrictModel


class RetryPolicy(StrictModel):
    """How often a source read or a destination publish is tried when it fails with a transient error."""

    attempts: int = Field(
        default=3, ge=1, le=20,
        description="Tries in all (1: no retry) of a source read or a destination publish that fails with a "
        "transient error (connection killed or reset, server restarting, serialization failure, deadlock, too "
        "many connections). Errors that cannot heal (authentication, missing table, types, validation) fail at once.",
    )
    backoff_seconds: float = Field(
        default=2.0, ge=0, le=600, description="Wait before the first retry; each later retry waits twice as long."
    )
    max_backoff_seconds: float = Field(default=30.0, ge=0, le=3600, description="The longest wait between two tries.")

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        return min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (retry - 1))

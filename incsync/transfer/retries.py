"""Retry source reads and destination publishes on errors that heal by themselves (docs/design.md#faults).

A connection killed or reset, a server restarting, a serialization failure or deadlock, too many
connections: the same step is tried again after a backoff, up to ``attempts`` times in all. Errors
that cannot heal (authentication, a missing table, a type or validation error, a lost lease) fail at
once. Each retry is logged with the recipient and the cause, secrets removed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from incsync.config.model import RetryPolicy
from incsync.errors import (
    ConfigError,
    InputError,
    LeaseError,
    OwnershipError,
    SchemaError,
    StagingError,
    ValidationError,
    root_cause,
    sanitize,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# SQLSTATEs (PostgreSQL; MariaDB's JDBC driver reports the same classes) of errors that heal.
TRANSIENT_SQLSTATES = {
    "40001": "serialization failure",
    "40P01": "deadlock",
    "53300": "too many connections",
    "57P01": "connection terminated by an administrator",
    "57P02": "server crashed",
    "57P03": "server starting up or shutting down",
    "08000": "connection error",
    "08001": "cannot connect",
    "08003": "connection does not exist",
    "08006": "connection failure",
    "08S01": "communication link failure",
    "70100": "query interrupted",
}
# Phrases of the same errors as drivers and Spark spell them (lower case).
TRANSIENT_PHRASES = {
    "terminating connection due to administrator command": "connection terminated by an administrator",
    "server closed the connection unexpectedly": "connection lost",
    "connection reset": "connection reset",
    "broken pipe": "connection lost",
    "an i/o error occurred while sending to the backend": "connection lost",
    "this connection has been closed": "connection lost",
    "connection is closed": "connection lost",
    "the connection is lost": "connection lost",
    "consuming input failed": "connection lost",
    "connection was killed": "connection killed",
    "query execution was interrupted": "query interrupted",
    "communications link failure": "communication link failure",
    "socket error": "connection lost",
    "unexpected end of stream": "connection lost",
    "connection refused": "server not accepting connections (restarting?)",
    "the database system is starting up": "server starting up",
    "the database system is shutting down": "server shutting down",
    "the database system is in recovery mode": "server recovering",
    "server shutdown in progress": "server shutting down",
    "could not serialize access": "serialization failure",
    "deadlock detected": "deadlock",
    "deadlock found": "deadlock",
    "too many connections": "too many connections",
    "too many clients": "too many connections",
    "remaining connection slots are reserved": "too many connections",
}
# Errors of these kinds never heal by trying again, whatever their text says.
PERMANENT = (ConfigError, InputError, LeaseError, OwnershipError, SchemaError, StagingError, ValidationError)
PERMANENT_PHRASES = ("password authentication failed", "access denied", "does not exist", "doesn't exist", "permission denied")


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and node not in out and len(out) < 20:
        out.append(node)
        node = node.__cause__ or node.__context__
    return out


def transient_cause(exc: BaseException) -> str | None:
    """Why ``exc`` may heal by trying again (a short phrase), or None when it cannot."""
    chain = _chain(exc)
    if any(isinstance(e, PERMANENT) for e in chain):
        return None
    texts = []
    for e in chain:
        state = getattr(e, "sqlstate", None)
        if state in TRANSIENT_SQLSTATES:
            return TRANSIENT_SQLSTATES[state]
        texts.append(str(e).lower())
        texts.append(root_cause(e).lower())
    text = " ".join(texts)
    if any(p in text for p in PERMANENT_PHRASES):
        return None
    return next((why for phrase, why in TRANSIENT_PHRASES.items() if phrase in text), None)


def with_retries(
    step: Callable[[], T],
    *,
    policy: RetryPolicy,
    what: str,
    before_retry: Callable[[], None] | None = None,
    secrets: list[str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``step``; on a transient error run ``before_retry`` (clean up), wait, and run it again."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return step()
        except Exception as exc:
            why = transient_cause(exc)
            if why is None or attempt == policy.attempts:
                if why is not None:
                    log.error("%s: %s, and still after %s tries; giving up", what, why, attempt)
                raise
            delay = policy.delay(attempt)
            log.warning(
                "%s failed (%s: %s); retry %s of %s in %.1f s",
                what, why, sanitize(root_cause(exc), secrets or []), attempt, policy.attempts - 1, delay,
            )
            if before_retry is not None:
                before_retry()
            sleep(delay)
    raise AssertionError("unreachable")

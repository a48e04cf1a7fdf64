"""Which errors are retried, how often, with what backoff and log line; and the `retries` setting."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg.errors
import pytest
import yaml

from incsync.config.load import load_config
from incsync.config.model import RetryPolicy
from incsync.errors import ConfigError, PublishError, SourceError, ValidationError
from incsync.transfer.retries import transient_cause, with_retries
from incsync_tests.support.lake import lake_config


def _chained(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:  # noqa: BLE001 - returned for the assertion
        return exc


CASES = [
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), "connection terminated by an administrator"),
    (psycopg.errors.SerializationFailure("could not serialize access"), "serialization failure"),
    (psycopg.errors.DeadlockDetected("deadlock detected"), "deadlock"),
    (psycopg.errors.TooManyConnections("sorry, too many clients already"), "too many connections"),
    (psycopg.errors.CannotConnectNow("the database system is starting up"), "server starting up or shutting down"),
    (_chained(PublishError("publish failed"), psycopg.OperationalError("server closed the connection unexpectedly")), "connection lost"),
    (SourceError("source app: org.postgresql.util.PSQLException: An I/O error occurred while sending to the backend."), "connection lost"),
    (SourceError("source maria: java.sql.SQLNonTransientConnectionException: (conn=12) Connection was killed"), "connection killed"),
    (SourceError("source maria: Communications link failure"), "communication link failure"),
    (RuntimeError("java.net.SocketException: Connection reset"), "connection reset"),
    (SourceError("source app: FATAL: password authentication failed for user \"reader\""), None),
    (SourceError('source app: ERROR: relation "public.ordrs" does not exist'), None),
    (psycopg.errors.UndefinedTable('relation "x" does not exist'), None),
    (psycopg.errors.InvalidTextRepresentation("invalid input syntax for type integer"), None),
    (_chained(ValidationError("duplicate keys"), ConnectionResetError("connection reset")), None),
    (ValueError("Cannot cast string to int64"), None),
]


@pytest.mark.parametrize(("error", "why"), CASES, ids=[f"{type(e).__name__}-{w or 'permanent'}" for e, w in CASES])
def test_transient_errors_are_told_from_permanent_ones(error: Exception, why: str | None) -> None:
    assert transient_cause(error) == why


def test_a_transient_error_is_retried_with_backoff_and_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    calls, cleanups, waits = [], [], []

    def step() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise SourceError("source app: connection to postgresql://reader:s3cret@db/app: Connection reset")
        return "done"

    policy = RetryPolicy(attempts=3, backoff_seconds=0.5, max_backoff_seconds=0.75)
    with caplog.at_level(logging.WARNING, logger="incsync.transfer.retries"):
        assert with_retries(step, policy=policy, what="read of source app for model orders, recipient acme",
                            before_retry=lambda: cleanups.append(1), sleep=waits.append) == "done"
    assert (len(calls), len(cleanups), waits) == (3, 2, [0.5, 0.75])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("read of source app for model orders, recipient acme failed (connection reset: ")
    assert lines[0].endswith("retry 1 of 2 in 0.5 s") and "s3cret" not in " ".join(lines)


def test_retries_stop_after_the_attempts_and_a_permanent_error_is_not_retried() -> None:
    calls = []

    def reset() -> None:
        calls.append("reset")
        raise ConnectionResetError("Connection reset by peer")

    with pytest.raises(ConnectionResetError):
        with_retries(reset, policy=RetryPolicy(attempts=2, backoff_seconds=0), what="x", sleep=lambda _: None)
    assert calls == ["reset", "reset"]

    def denied() -> None:
        calls.append("denied")
        raise SourceError("source app: FATAL: password authentication failed; check `user`")

    with pytest.raises(SourceError):
        with_retries(denied, policy=RetryPolicy(), what="x", sleep=lambda _: None)
    assert calls.count("denied") == 1


def test_the_retries_setting_defaults_to_three_attempts_and_is_checked(tmp_path: Path) -> None:
    file = lake_config(tmp_path)
    assert load_config(file).retries == RetryPolicy(attempts=3, backoff_seconds=2.0, max_backoff_seconds=30.0)
    doc = yaml.safe_load(file.read_text())
    doc["retries"] = {"attempts": 5, "backoff_seconds": 0.1}
    file.write_text(yaml.safe_dump(doc))
    assert load_config(file).retries.attempts == 5
    doc["retries"] = {"attempts": 0, "backof_seconds": 1}
    file.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_config(file)
    assert "retries.attempts" in str(err.value) and "retries.backof_seconds" in str(err.value)

"""core.blame: the party and reason of an error, by the side it left, its types, SQLSTATE and errno."""

from __future__ import annotations

import errno

import psycopg.errors
import pytest

from incsync.core.blame import DESTINATION, SOURCE, Blame, Party, blame, combined, on_side, parse_party
from incsync.errors import ConfigError, LeaseError, OwnershipError, PublishError, SourceError, ValidationError


def _raised(error: BaseException, side: str | None = None, name: str = "d") -> BaseException:
    try:
        if side is None:
            raise error
        with on_side(side, name):
            raise error
    except BaseException as exc:  # noqa: BLE001 - the test returns what was raised
        return exc
    raise AssertionError("unreachable")


def _wrapped(cause: BaseException) -> BaseException:
    """A PublishError raised from ``cause``, as the PostgreSQL destination wraps its errors."""
    try:
        try:
            raise cause
        except BaseException as exc:
            raise PublishError("publish failed and nothing was committed") from exc
    except PublishError as outer:
        return outer


@pytest.mark.parametrize(("error", "party", "starts"), [
    (psycopg.errors.InsufficientPrivilege("permission denied for schema acme"), "recipient", "destination d denied incsync a privilege"),
    (psycopg.errors.DiskFull("could not extend file"), "recipient", "destination d is out of space"),
    (psycopg.errors.InvalidPassword("password authentication failed"), "recipient", "destination d refused incsync's login"),
    (psycopg.errors.UndefinedColumn("column \"x\" does not exist"), "recipient", "destination d: the recipient changed its table"),
    (OSError(errno.ENOSPC, "No space left on device"), "recipient", "destination d is out of space"),
    (OSError(errno.EROFS, "Read-only file system"), "recipient", "destination d is on a read-only file system"),
    (PermissionError(errno.EACCES, "Permission denied"), "recipient", "destination d may not be written to"),
    (IsADirectoryError(errno.EISDIR, "Is a directory"), "recipient",
     ("destination d: a folder stands where the destination's file should be: the recipient must move it away, or the "
      "provider points the destination elsewhere")),
    (OSError("IO Error: Could not read from file \"/x/acme.duckdb\": Is a directory"), "recipient",
     "destination d: a folder stands where the destination's file should be"),
    (OSError("Generic LocalFileSystem error: ... (os error 28)"), "recipient", "destination d is out of space"),
    (PublishError("destination d: cannot connect to PostgreSQL with the DSN in $X: connection failed: FATAL:  role "
                  "\"r\" is not permitted to log in"), "recipient", "destination d refused incsync's login"),
    (PublishError("connection failed: connection to server at \"10.0.0.1\", port 5432 failed: Connection refused"),
     "unknown", "destination d could not be reached"),
    (RuntimeError("something new"), "unknown", "destination d failed (something new)"),
    (ConfigError("environment", ["destinations[d].dsn_env: variable X is not set; export the DSN in it"]), "provider",
     "incsync's configuration"),
    (ValidationError("duplicate key"), "provider", "source rows break the model's contract"),
    (LeaseError("another writer"), "provider", "another incsync run"),
    (OwnershipError("model m: table t belongs to recipient b (tenant 2)"), "provider", "two recipients write to one"),
    (OwnershipError("model m: table t has no incsync owner stamp and its transfer log does not name recipient a"),
     "recipient", "a table incsync did not create"),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None)
def test_destination_side_errors(error: BaseException, party: str, starts: str) -> None:
    got = blame(_wrapped(_raised(error, DESTINATION)) if isinstance(error, psycopg.Error) else _raised(error, DESTINATION))
    assert (got.party.value, got.reason[: len(starts)]) == (party, starts)


def test_the_same_error_on_the_source_side_is_the_providers() -> None:
    got = blame(_raised(psycopg.errors.InsufficientPrivilege("permission denied for table orders"), SOURCE, "app_db"))
    assert got == Blame(Party.PROVIDER, "source app_db failed (permission denied for table orders): fix the source or "
                                        "the model's settings, then rerun")
    fix = blame(_raised(SourceError("source app_db: read of x: " + "detail " * 60 + "; check `user` (u) and the password")))
    assert fix.party == Party.PROVIDER and fix.reason.endswith("…; check `user` (u) and the password")
    assert len(fix.reason) <= 240


def test_an_unmarked_error_is_incsyncs() -> None:
    assert blame(KeyError("x")).reason == "incsync failed ('x'): read the run's error, fix the cause, then rerun"


def test_the_innermost_side_wins_and_parties_combine() -> None:
    error = _raised(psycopg.errors.DiskFull("full"), DESTINATION, "inner")
    error = _raised(error, SOURCE, "outer")
    assert blame(error).reason.startswith("destination inner is out of space")
    p, r, u = (Blame(party, "") for party in Party)
    assert (combined([r, u]), combined([r, p, u]), combined([r]), combined([])) == (Party.UNKNOWN, Party.PROVIDER, Party.RECIPIENT, None)
    assert parse_party("Recipient") == Party.RECIPIENT
    with pytest.raises(ValueError, match='unknown blamed party "them"; use one of provider, recipient, unknown'):
        parse_party("them")

"""Whose failure is it: the provider's (source, config, data, incsync) or the recipient's (its destination's
credentials, permissions, space, or its own changes to its table), with a one-line reason naming the fix.

The side that failed is only known where the call was made: ``on_side`` marks an exception as the
source's or a destination's as it leaves that call; ``blame`` then reads the mark, the exception
types of the cause chain (by class name: this module imports no upper package), PostgreSQL SQLSTATEs
and OS errnos. Pure: no I/O.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum

SOURCE = "source"
DESTINATION = "destination"
_MARK = "incsync_side"


class Party(str, Enum):
    PROVIDER = "provider"
    RECIPIENT = "recipient"
    UNKNOWN = "unknown"


PARTIES = tuple(p.value for p in Party)


@dataclass(frozen=True)
class Blame:
    """Who is to fix a failed transfer, and how (one line)."""

    party: Party
    reason: str

    def __str__(self) -> str:
        return f"{self.party.value}: {self.reason}"


def mark(error: BaseException, side: str, name: str) -> None:
    """Record that ``error`` left a call to ``side`` (source or destination) named ``name``; the innermost mark wins."""
    if getattr(error, _MARK, None) is None:
        try:
            setattr(error, _MARK, (side, name))
        except (AttributeError, TypeError):  # an exception type without a __dict__: it stays unmarked
            pass


@contextmanager
def on_side(side: str, name: str) -> Iterator[None]:
    """Mark whatever the block raises as ``side``'s (see ``mark``)."""
    try:
        yield
    except BaseException as exc:
        mark(exc, side, name)
        raise


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    node: BaseException | None = error
    while node is not None and all(node is not s for s in seen):
        seen.append(node)
        node = node.__cause__ or node.__context__
    return seen


def _names(error: BaseException) -> set[str]:
    return {c.__name__ for c in type(error).__mro__}


def _first(chain: list[BaseException], *names: str) -> BaseException | None:
    return next((e for e in chain if _names(e) & set(names)), None)


def _sqlstate(chain: list[BaseException]) -> str | None:
    for e in chain:
        state = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        if isinstance(state, str) and len(state) == 5:
            return state
    return None


_ERRNO_IN_TEXT = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]|Os \{ code: (\d+)")


def _errno(chain: list[BaseException]) -> int | None:
    for e in chain:
        if isinstance(e, OSError) and e.errno:
            return e.errno
        found = _ERRNO_IN_TEXT.search(str(e))  # delta-rs and object stores: "... (os error 13)"
        if found:
            return int(next(g for g in found.groups() if g))
    return None


def _text(chain: list[BaseException]) -> str:
    return " ".join(" ".join(str(e).split()) for e in chain).lower()


LOGIN_REFUSED = ("password authentication failed", "is not permitted to log in", "no pg_hba.conf entry",
                 "authentication failed", "access denied for user")
UNREACHABLE = ("connection refused", "could not translate host name", "timed out", "timeout expired",
               "name or service not known", "network is unreachable", "no route to host")
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
SPACE_TEXT = ("no space left on device", "disk quota exceeded", "quotaexceeded", "quota exceeded")


def blame(error: BaseException, *, side: str | None = None, name: str | None = None) -> Blame:
    """Classify a failed transfer's error; ``side``/``name`` default to the mark ``on_side`` left on it."""
    chain = _chain(error)
    marked = next((getattr(e, _MARK) for e in chain if getattr(e, _MARK, None) is not None), None)
    if side is None and marked is not None:
        side, name = marked
    if side is None and _first(chain, "Py4JJavaError", "AnalysisException", "SourceError"):
        side, name = SOURCE, name or "the source"
    if (typed := _typed(chain, side)) is not None:
        return typed
    if side == DESTINATION:
        return _destination(chain, name or "the destination")
    what = f"source {name}" if side == SOURCE and name else "the source"
    if side == SOURCE:
        return Blame(Party.PROVIDER, f"{what} failed ({_short(error)}): fix the source or the model's settings, then rerun")
    return Blame(Party.PROVIDER, f"incsync failed ({_short(error)}): read the run's error, fix the cause, then rerun")


def _typed(chain: list[BaseException], side: str | None) -> Blame | None:
    """incsync's own errors that say whose they are, whichever side raised them."""
    if e := _first(chain, "ConfigError"):
        return Blame(Party.PROVIDER, f"incsync's configuration ({_short(e)}): fix incsync.yaml or the variables it names")
    if _first(chain, "ValidationError"):
        return Blame(Party.PROVIDER, "source rows break the model's contract (NULL or duplicate primary key, NULL "
                                     "last-modified): fix the rows at the source or the model's primary_key")
    if _first(chain, "ConversionError"):
        return Blame(Party.PROVIDER, "a source value cannot convert to its column's type: set `column_types` on the "
                                     "model (docs/types.md)")
    if _first(chain, "MassDeleteError"):
        return Blame(Party.PROVIDER, "the transfer would delete more than max_delete_fraction of the recipient's rows: "
                                     "check the source, then rerun with --allow-mass-delete if the deletes are real")
    if _first(chain, "StagingError"):
        return Blame(Party.PROVIDER, "staging lost rows between the source read and the staged files: give Spark's "
                                     "executors and incsync one shared staging_dir")
    if _first(chain, "LeaseError"):
        return Blame(Party.PROVIDER, "another incsync run kept publishing to the same copy: let it finish, then rerun")
    if _first(chain, "ManifestIntegrityError"):
        return Blame(Party.RECIPIENT, "published files were changed after publishing: the recipient must restore them "
                                      "(or the provider runs a full refresh)")
    if e := _first(chain, "OwnershipError"):
        if "has no incsync owner stamp" in str(e):
            return Blame(Party.RECIPIENT, "a table incsync did not create stands where the recipient's copy goes: "
                                          "the recipient must drop or rename it")
        return Blame(Party.PROVIDER, "two recipients write to one destination table: give each recipient a "
                                     "destination of its own (or run `incsync transfer-ownership`)")
    if e := _first(chain, "SchemaError"):
        if "the recipient changed a column's type" in str(e):
            return Blame(Party.RECIPIENT, "the recipient changed a column's type in its table: the recipient must change "
                                          "it back, or the provider runs a full refresh (see the run's error)")
        if "cannot change the type of a column another object uses" in str(e):
            return Blame(Party.RECIPIENT, "the recipient's own view, rule or policy on its table blocks a column type "
                                          "change: the recipient must drop it around the change (see the run's error)")
        if side != DESTINATION or "the source changed" in str(e) or "cannot store" in str(e):
            return Blame(Party.PROVIDER, f"the model's schema ({_short(e)}): change the model or run a full refresh")
    if side == SOURCE and (e := _first(chain, "SourceError")):
        return Blame(Party.PROVIDER, _with_fix(e))
    return None


def _destination(chain: list[BaseException], name: str) -> Blame:
    state, code, text = _sqlstate(chain), _errno(chain), _text(chain)
    where = f"destination {name}"
    if (state or "").startswith("28") or any(s in text for s in LOGIN_REFUSED) or re.search(r'role "[^"]*" does not exist', text):
        return Blame(Party.RECIPIENT, f"{where} refused incsync's login: the recipient must restore the role's login "
                                      "or password, or send new credentials for the destination's DSN")
    if state == "3D000" or re.search(r'database "[^"]*" does not exist', text):
        return Blame(Party.RECIPIENT, f"{where}: the database in the destination's DSN is gone: the recipient must "
                                      "restore it, or send the DSN of its new database")
    if state == "42501" or (state is not None and "permission denied" in text):
        return Blame(Party.RECIPIENT, f"{where} denied incsync a privilege it needs: the recipient must grant the "
                                      "DSN's role USAGE and CREATE on its schema and write on its tables again")
    if code in (errno.EACCES, errno.EPERM) or "permission denied" in text or "operation not permitted" in text:
        return Blame(Party.RECIPIENT, f"{where} may not be written to (permission denied on its folder): the "
                                      "recipient must give incsync write access to it again")
    if code == errno.EROFS or "read-only file system" in text:
        return Blame(Party.RECIPIENT, f"{where} is on a read-only file system: the recipient must make it writable "
                                      "again, or move the destination")
    if state in ("53100", "53400") or code in NO_SPACE or any(s in text for s in SPACE_TEXT):
        return Blame(Party.RECIPIENT, f"{where} is out of space (disk full or quota reached): the recipient must free "
                                      "space or raise its quota; the next run resumes")
    if code in (errno.ENOTDIR, errno.EEXIST) or "not a directory" in text:
        return Blame(Party.RECIPIENT, f"{where}: a file stands where the destination's folder should be: the "
                                      "recipient must move it away, or the provider points the destination elsewhere")
    if code == errno.EISDIR or "is a directory" in text:
        return Blame(Party.RECIPIENT, f"{where}: a folder stands where the destination's file should be: the "
                                      "recipient must move it away, or the provider points the destination elsewhere")
    if state is not None and (state[:2] in ("23", "42", "2B", "0A", "55", "57") or state == "25006"):
        return Blame(Party.RECIPIENT, f"{where}: the recipient changed its table so incsync cannot write it "
                                      f"(SQLSTATE {state}): the recipient must undo the change (see the run's error)")
    if _first(chain, "SchemaMismatchError", "DeltaProtocolError"):
        return Blame(Party.RECIPIENT, f"{where}: the recipient changed its Delta table's schema or protocol so incsync "
                                      "cannot write it: the recipient must undo the change")
    if (state or "").startswith("08") or any(s in text for s in UNREACHABLE):
        return Blame(Party.UNKNOWN, f"{where} could not be reached: check that its server is up and reachable from "
                                    "incsync, then rerun")
    return Blame(Party.UNKNOWN, f"{where} failed ({_short(chain[0])}): read the run's error to tell whose it is")


def _with_fix(error: BaseException, *, limit: int = 240) -> str:
    """The error's one line, its cause cut short so the fix (after the last "; ") stays whole."""
    text = _short(error, limit=10_000)
    cause, sep, fix = text.rpartition("; ")
    if len(text) <= limit or not sep:
        return _short(error, limit=limit)
    keep = max(40, limit - len(fix) - 3)
    return f"{cause[: keep - 1]}…; {fix}" if len(cause) > keep else f"{cause}; {fix}"


def _short(error: BaseException, *, limit: int = 160) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def combined(blames: Iterable[Blame]) -> Party | None:
    """One party for a run of several failures: the provider's when any is (its on-call acts), else unknown, else recipient."""
    parties = {b.party for b in blames}
    for party in (Party.PROVIDER, Party.UNKNOWN, Party.RECIPIENT):
        if party in parties:
            return party
    return None


def parse_party(text: str) -> Party:
    """``provider`` / ``recipient`` / ``unknown`` (any case); ValueError naming the choices otherwise."""
    try:
        return Party(text.strip().lower())
    except ValueError:
        raise ValueError(f'unknown blamed party "{text}"; use one of {", ".join(PARTIES)}') from None

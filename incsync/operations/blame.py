"""A failed run's blamed party in Dagster: per recipient in its failure metadata, combined in its tags
(``incsync/blamed``, ``incsync/blame_reason``), and read back for ``incsync transfers``, the alert sensor
and a transfer log (``run_blame``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import dagster as dg

from incsync.config.tags import BLAME_REASON_TAG, BLAMED_TAG
from incsync.core.blame import Blame, Party, blame, combined
from incsync.transfer.request import SpanFailure

MAX_TAG_VALUE = 255
BLAMED = "blamed"  # failure metadata keys
BLAME_REASON = "blame_reason"
BLAMED_BY_RECIPIENT = "blamed_by_recipient"
WORKER_LOST = Blame(Party.UNKNOWN, "the run's worker was lost (process killed or host gone): rerun; "
                                   "if it recurs, check the worker's memory and host")


def recipient_blames(failures: Iterable[SpanFailure]) -> dict[str, Blame]:
    """Each failed recipient's blame, from its first failure (its later spans fail because that one did)."""
    out: dict[str, Blame] = {}
    for f in failures:
        if f.recipient_id not in out:
            out[f.recipient_id] = blame(f.error)
    return dict(sorted(out.items()))


def run_level(blames: dict[str, Blame], *, recipients: int = 1) -> Blame | None:
    """The run's one blame: its most urgent party (``core.blame.combined``), with the first such recipient's
    reason, named when the run has several ``recipients``."""
    party = combined(blames.values())
    if party is None:
        return None
    rid, first = next((r, b) for r, b in blames.items() if b.party == party)
    reason = first.reason if max(recipients, len(blames)) == 1 else f"recipient {rid}: {first.reason}"
    return Blame(party, reason)


def failure_metadata(blames: dict[str, Blame], *, recipients: int = 1) -> dict[str, object]:
    """What the run's failure event carries: the run's party and reason, and each recipient's."""
    run = run_level(blames, recipients=recipients)
    if run is None:
        return {}
    return {
        BLAMED: run.party.value,
        BLAME_REASON: run.reason,
        BLAMED_BY_RECIPIENT: dg.MetadataValue.json(
            {rid: {"party": b.party.value, "reason": b.reason} for rid, b in blames.items()}
        ),
    }


def blame_tags(run: Blame) -> dict[str, str]:
    reason = run.reason if len(run.reason) <= MAX_TAG_VALUE else run.reason[: MAX_TAG_VALUE - 1] + "…"
    return {BLAMED_TAG: run.party.value, BLAME_REASON_TAG: reason}


def tag_blame(instance: dg.DagsterInstance, run_id: str, run: Blame | None) -> None:
    """Tag the run with its blamed party, so listings and sensors read no event to know it."""
    if run is None:
        return
    try:
        instance.add_run_tags(run_id, blame_tags(run))
    except Exception:  # noqa: BLE001 - the tag is a convenience; the run's failure (with its metadata) is what matters
        pass


def blame_of_tags(tags: dict[str, str]) -> Blame | None:
    """The blame a run's tags record (None: none recorded)."""
    party = tags.get(BLAMED_TAG)
    if party not in {p.value for p in Party}:
        return None
    return Blame(Party(party), tags.get(BLAME_REASON_TAG, ""))


def recipients_blamed(instance: dg.DagsterInstance, run_id: str) -> dict[str, Blame]:
    """Each failed recipient's blame, from the run's step failure metadata (empty: none recorded)."""
    for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = event.dagster_event.step_failure_data if event.dagster_event else None
        metadata = data.user_failure_data.metadata if data and data.user_failure_data else {}
        if BLAMED_BY_RECIPIENT in metadata:
            value = metadata[BLAMED_BY_RECIPIENT].value
            return {rid: Blame(Party(b["party"]), b["reason"]) for rid, b in dict(value).items()}  # type: ignore[arg-type]  # a JSON metadata value: a mapping of recipient to blame
    return {}


def run_blame(instance: dg.DagsterInstance, run: dg.DagsterRun, *, orphaned: bool = False) -> Blame | None:
    """A failed run's blame: its tags, else (a run that failed before incsync could classify it, e.g. in
    Dagster or in the run's set-up) its failure message's error types, else unknown."""
    if orphaned:
        return WORKER_LOST
    tagged = blame_of_tags(dict(run.tags))
    if tagged is not None:
        return tagged
    error = failure_error(instance, run.run_id)
    return blame(error) if error is not None else Blame(
        Party.UNKNOWN, "the run failed before incsync saw an error: read the run's events in Dagster"
    )


def recipient_blame(instance: dg.DagsterInstance, run: dg.DagsterRun, recipient: str, *, orphaned: bool = False) -> Blame | None:
    """One recipient's blame in a failed run (what a transfer log records per transfer): its own from the run's
    failure metadata, else the run's. None for a recipient of a run that failed but not because of it."""
    return each_recipient_blame(instance, run, [recipient], orphaned=orphaned)[recipient]


def each_recipient_blame(instance: dg.DagsterInstance, run: dg.DagsterRun, recipients: Iterable[str], *,
                         orphaned: bool = False) -> dict[str, Blame | None]:
    """``recipient_blame`` of each of ``recipients``, reading the run's events once (a run holds up to 256)."""
    own = {} if orphaned else recipients_blamed(instance, run.run_id)
    if own:
        return {r: own.get(r) for r in recipients}
    fallback = run_blame(instance, run, orphaned=orphaned)
    return {r: fallback for r in recipients}


def failure_error(instance: dg.DagsterInstance, run_id: str) -> BaseException | None:
    """The run's failed step's error rebuilt from its record (class names and messages, causes chained),
    for ``core.blame`` to classify a run that failed before incsync tagged it."""
    from incsync.errors import IncsyncError

    known: dict[str, type[BaseException]] = {}
    stack: list[type[BaseException]] = [IncsyncError]
    while stack:
        cls = stack.pop()
        known[cls.__name__] = cls
        stack += cls.__subclasses__()
    for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = event.dagster_event.step_failure_data if event.dagster_event else None
        if data and data.error:
            errors, node = [], data.error
            while node is not None:
                cls = known.get(node.cls_name) or type(node.cls_name or "Error", (Exception,), {})
                errors.append(cls.__new__(cls))
                Exception.__init__(errors[-1], node.message.strip())
                node = node.cause
            for outer, inner in itertools.pairwise(errors):
                outer.__cause__ = inner
            return errors[0]
    return None

"""Execute a run's transfer plan: open the reads, stage each once, split a fan-out by tenant, validate
and publish every transfer, in parallel within each destination's ``max_concurrent_transfers``
(docs/design.md#transfer-plans).

A model's asset body plans the run's transfers (``TransferRun.plan``); its IO manager runs ``execute``
while it holds the run's transfer slots. A recipient's failure fails only its own partitions; a lost
lease starts that recipient's uncommitted windows over from fresh state; a recipient's later transfers
run after its earlier ones committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.dataset as ds

from incsync.core.blame import SOURCE, on_side
from incsync.core.crashpoints import crash_point
from incsync.core.lease import LEASE_ATTEMPTS
from incsync.core.transfer_id import new_transfer_id
from incsync.errors import IncsyncError, LeaseError, SourceError, StagingError, root_cause
from incsync.staging.batch import StagedBatch, filtered_batch, within_by_statistics
from incsync.staging.folders import claim, remove, remove_stale_staging
from incsync.staging.spark import stage, stage_by_tenant
from incsync.transfer.errors import named_error
from incsync.transfer.publish import publish_span
from incsync.transfer.reads import Read, open_transfer, plan_reads, reopen
from incsync.transfer.request import (
    OnCommit,
    OnStart,
    PreparedSpan,
    SpanFailure,
    Transfer,
    TransferOutcome,
    TransferPlan,
    TransferRequest,
)
from incsync.transfer.retries import PERMANENT_PHRASES, transient_cause, with_retries

log = logging.getLogger(__name__)

MAX_PARALLEL_PUBLISHES = 4


def _started(_requests: Sequence[TransferRequest]) -> None:
    pass


def execute(plan: TransferPlan, *, staging_root: Path, on_commit: OnCommit, on_start: OnStart = _started) -> list[SpanFailure]:
    """Open, stage and publish every transfer of ``plan``, each recipient's in order; return what failed
    (empty: all committed).

    ``on_start`` hears of each transfer as its own work starts: its read and staging when it runs alone,
    its publish when it is a recipient's share of a fan-out read (whose shared read is the run's)."""
    committed: set[object] = set()
    lock = threading.Lock()

    def tracked(request: TransferRequest, outcome: TransferOutcome) -> None:
        with lock:
            committed.add(request.partition.key)
            on_commit(request, outcome)

    run = plan_reads(plan)
    failures = list(run.failures)
    for read in run.reads:
        if read.fan_out:
            failures += _publish_fan_out(read, staging_root=staging_root, on_commit=tracked, committed=committed,
                                         on_start=on_start)
        else:
            [span] = read.spans
            failures += _run_alone(span.transfer, staging_root=staging_root, on_commit=tracked, committed=committed,
                                   read=read, on_start=on_start)
    failed = {f.recipient_id for f in failures}
    for transfer in run.later:  # a recipient's later windows wait for its earlier ones, and fail with them
        if transfer.recipient.id in failed:
            failures.append(SpanFailure.of(transfer, IncsyncError(
                f"recipient {transfer.recipient.id}: not run because an earlier window of this run failed"
            )))
            continue
        failures += _run_alone(transfer, staging_root=staging_root, on_commit=tracked, committed=committed,
                               on_start=on_start)
    return failures


def run_span(transfer: Transfer, *, staging_root: Path, on_commit: OnCommit, read: Read | None = None) -> None:
    """One transfer over contiguous windows of one recipient: its read (opened now unless given), staged
    once, published. The staging folder is removed on the way out, success or not."""
    read = read or open_transfer(transfer)
    [span] = read.spans
    _assign_staging(span, staging_root)
    with claim(span.staging):
        crash_point("after_claim")
        batch = _stage_with_retries(read, lambda r: stage(r.dataframe, span.staging, known_empty=r.known_empty, collect=r.collect),
                                    folder=span.staging)
        publish_span(span, batch, on_commit=on_commit)


def run_transfer(request: TransferRequest, *, staging_root: Path) -> TransferOutcome:
    """One window alone (tests and tools): the transfer of a single partition. A full refresh commits every
    window of the recipient's span (docs/design.md#the-partition-view): its outcome is then the commit's, with the
    record the destination stores."""
    outcomes: list[TransferOutcome] = []
    run_span(Transfer.alone(request), staging_root=staging_root, on_commit=lambda _r, o: outcomes.append(o))
    if len(outcomes) == 1:
        return outcomes[0]
    last = outcomes[-1]
    return replace(last, record=last.commit or last.record)


def _assign_staging(span: PreparedSpan, staging_root: Path) -> None:
    """The transfer's private staging folder; folders that dead transfers of its (model, recipient) left go first."""
    model, recipient = span.transfer.model, span.transfer.recipient
    remove_stale_staging(staging_root, model, recipient)
    span.staging = staging_root / f"{model.model_name}-{recipient.id}-{span.transfer_id}"


Staged = TypeVar("Staged")


def _stage_with_retries(read: Read, stage_it: Callable[[Read], Staged], *, folder: Path) -> Staged:
    """Stage ``read``; after a transient source failure, the folder is emptied and the read asked again."""
    current = [read]

    def again() -> None:
        remove(folder)
        current[0] = reopen(current[0])

    with on_side(SOURCE, read.run.model.source):  # staging runs the source query
        return with_retries(lambda: stage_it(current[0]), policy=read.run.retries, before_retry=again, what=read.what)


def _run_alone(
    transfer: Transfer, *, staging_root: Path, on_commit: OnCommit, committed: set[object],
    read: Read | None = None, on_start: OnStart = _started,
) -> list[SpanFailure]:
    """One transfer with its own read; a lost lease starts the uncommitted windows over from fresh state."""
    remaining = transfer
    for attempt in range(1, LEASE_ATTEMPTS + 1):
        try:
            on_start(remaining.requests)
            run_span(remaining, staging_root=staging_root, on_commit=on_commit, read=read)
            return []
        except LeaseError as exc:
            remaining, read = remaining.without(committed), None
            if attempt == LEASE_ATTEMPTS:
                return [SpanFailure.of(remaining, exc)]
            log.warning("%s (attempt %s of %s; starting over from the new state)", exc, attempt, LEASE_ATTEMPTS)
        except Exception as exc:  # noqa: BLE001 - one recipient's failure is reported, the others go on
            return [SpanFailure.of(remaining.without(committed), _named(exc, transfer))]
    raise AssertionError("unreachable")


def _publish_fan_out(
    read: Read, *, staging_root: Path, on_commit: OnCommit, committed: set[object], on_start: OnStart = _started,
) -> list[SpanFailure]:
    """Stage the shared read once, split by tenant, and publish each recipient's share to its destination.

    When the shared read fails for a reason one tenant's rows may hold (a value no faithful type holds,
    an engine error), each recipient is read alone instead: the rows at fault fail their recipient only."""
    prepared = read.spans
    model = read.run.model
    shared = staging_root / f"{model.model_name}-fanout-{new_transfer_id()}"
    with claim(shared):
        crash_point("after_claim")
        assert model.organization_column is not None
        column = model.organization_column
        try:
            schema, staged = _stage_with_retries(
                read, lambda r: stage_by_tenant(r.dataframe, shared, column, r.tenants, known_empty=r.known_empty,
                                                collect=r.collect),
                folder=shared,
            )
            _check_tenants(staged, read)
        except Exception as exc:  # noqa: BLE001 - the shared read failed: every recipient of it fails, or is read alone
            if not _isolable(exc, prepared):
                return [SpanFailure.of(p.transfer, exc) for p in prepared]
            log.warning("%s failed (%s: %s); reading each recipient alone, so that rows at fault fail only their "
                        "recipient", read.what, type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "")
            staged = None
        if staged is not None:
            log.info(
                "fan-out read of model %s: %s rows for %s recipients, staged once",
                model.model_name, sum(b.rows for b in {id(b): b for b in staged.values()}.values()), len(prepared),
            )
            return _in_parallel(prepared, lambda span: _publish_share(
                span, staged, schema, staging_root=staging_root, on_commit=on_commit, committed=committed,
                on_start=on_start,
            ))
    return _in_parallel(prepared, lambda span: _run_alone(
        span.transfer, staging_root=staging_root, on_commit=on_commit, committed=committed, on_start=on_start,
    ) or None)


def _publish_share(
    span: PreparedSpan, staged: dict[str, StagedBatch], schema: pa.Schema, *, staging_root: Path, on_commit: OnCommit,
    committed: set[object], on_start: OnStart,
) -> SpanFailure | None:
    """Publish one recipient's share of a staged fan-out read."""
    try:
        on_start(span.requests)
        _assign_staging(span, staging_root)
        with claim(span.staging):
            publish_span(span, _share_of(staged, schema, span), on_commit=on_commit)
        return None
    except LeaseError:
        # Another writer committed since this transfer read its state: redo it alone, from fresh state.
        rest = _run_alone(span.transfer.without(committed), staging_root=staging_root,
                          on_commit=on_commit, committed=committed, on_start=on_start)
        return rest[0] if rest else None
    except Exception as exc:  # noqa: BLE001 - one recipient's failure is its own
        return SpanFailure.of(span.transfer.without(committed), _named(exc, span.transfer))


def _in_parallel(
    prepared: Sequence[PreparedSpan], work: Callable[[PreparedSpan], list[SpanFailure] | SpanFailure | None],
) -> list[SpanFailure]:
    """Run ``work`` for each transfer, in parallel within each destination's ``max_concurrent_transfers``."""
    limits = _destination_limits(prepared)

    def limited(span: PreparedSpan) -> list[SpanFailure]:
        with limits[span.transfer.destination.name]:
            result = work(span)
        return [] if result is None else result if isinstance(result, list) else [result]

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_PUBLISHES, len(prepared))) as pool:
        return [f for failures in pool.map(limited, prepared) for f in failures]


def _isolable(exc: Exception, prepared: Sequence[PreparedSpan]) -> bool:
    """Whether reading each recipient alone may spare the others: not when the source itself failed (down,
    refused, or returned rows of no recipient) or staging cannot work, which alone reads would meet again."""
    if len(prepared) < 2 or transient_cause(exc) is not None or isinstance(exc, (SourceError, StagingError)):
        return False
    text = f"{exc} {root_cause(exc)}".lower()
    return not any(phrase in text for phrase in PERMANENT_PHRASES)  # refused, or no such table: alone too


def _named(exc: Exception, transfer: Transfer) -> Exception:
    return named_error(exc, model=transfer.model.model_name, recipient=transfer.recipient.id)


def _destination_limits(prepared: Sequence[PreparedSpan]) -> dict[str, threading.Semaphore]:
    limits: dict[str, threading.Semaphore] = {}
    for span in prepared:
        destination = span.transfer.destination
        if destination.name not in limits:
            limits[destination.name] = threading.Semaphore(destination.max_concurrent_transfers)
    return limits


def _check_tenants(staged: dict[str, StagedBatch], read: Read) -> None:
    """Every staged row must belong to one of the run's recipients: a tenant value the database matched
    but incsync cannot (e.g. ``042`` against an integer 42) would otherwise be dropped silently."""
    model = read.run.model
    wanted = set(read.tenants)
    stray = sorted(v for v, batch in staged.items() if batch.rows and v not in wanted)
    if stray:
        column = model.organization_column
        raise SourceError(
            f"model {model.model_name}: the source returned rows whose {column} ({stray[:3]}) equals none of the "
            "recipients' id_in_provider_system as written; write each id_in_provider_system exactly as the source "
            f"stores {column} (e.g. 42, not 042)"
        )


def _share_of(staged: dict[str, StagedBatch], schema: pa.Schema, span: PreparedSpan) -> StagedBatch:
    """One recipient's rows of the shared read, within its own bounds (NULL last-modified rows of its
    tenant included, so its validation names them)."""
    model, recipient = span.transfer.model, span.transfer.recipient
    mine = staged.get(recipient.id_in_provider_system)
    if mine is None:  # no row of this tenant in the read: an empty batch with the read's schema
        span.staging.mkdir(parents=True, exist_ok=True)
        return StagedBatch(path=span.staging, files=(), schema=schema, rows=0, bytes=0)
    lm = model.last_modified_column
    if within_by_statistics(mine, lm, lower=span.bounds.lower, upper=span.bounds.upper):
        # Every row is in this recipient's bounds (a backfill's share, always): its staged files serve as
        # they are, read in place (the fan-out's claim outlives every share's publish), not copied.
        span.staging.mkdir(parents=True, exist_ok=True)
        return mine
    kind = mine.schema.field(lm).type
    within = (ds.field(lm) >= pa.scalar(span.bounds.lower, kind)) & (ds.field(lm) < pa.scalar(span.bounds.upper, kind))
    return filtered_batch(mine, span.staging, within | ds.field(lm).is_null())

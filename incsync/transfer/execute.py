"""Execute a run's partitions as a transfer plan: coalesced spans (``run_span`` runs one), fan-out reads, parallel publishes.

DESIGN "Transfer plans". The partitions of one run become spans (contiguous windows of one
recipient, see ``plan.coalesce``). The first span of every recipient of a column-tenanted model is
read by ONE pushed-down query over all of them (each recipient with its own bounds), staged once,
split by tenant and published to each recipient's destination in parallel, within each
destination's ``max_concurrent_transfers``. A recipient's failure fails only its own partitions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from incsync.errors import LeaseError, SourceError
from incsync.core.lease import LEASE_ATTEMPTS
from incsync.transfer.plan import Span, coalesce
from incsync.transfer.retries import with_retries
from incsync.transfer.extract import COLLECT_MAX_ROWS, extract_with_retries
from incsync.transfer.prepare import prepare
from incsync.transfer.publish import publish_span
from incsync.staging.batch import StagedBatch, filtered_batch
from incsync.staging.spark import stage_by_tenant
from incsync.staging.folders import claim, remove
from incsync.transfer.request import OnCommit, PreparedSpan, TransferOutcome, TransferRequest
from incsync.core.transfer_id import new_transfer_id

log = logging.getLogger(__name__)

MAX_PARALLEL_PUBLISHES = 4
MAX_PARALLEL_STATE_READS = 8


@dataclass(frozen=True)
class SpanFailure:
    """A span that did not commit (or not all of it): its uncommitted partitions and why."""

    recipient_id: str
    requests: tuple[TransferRequest, ...]
    error: BaseException


def execute(requests: Sequence[TransferRequest], *, staging_root: Path, on_commit: OnCommit) -> list[SpanFailure]:
    """Run every partition of ``requests``; return what failed (empty: all committed)."""
    if not requests:
        return []
    whole = frozenset(r.recipient.id for r in requests if r.full_refresh)
    spans = coalesce(list(requests), whole_recipient=whole)
    firsts: list[Span[TransferRequest]] = []
    later: list[Span[TransferRequest]] = []
    seen: set[str] = set()
    for span in spans:
        (later if span.recipient_id in seen else firsts).append(span)
        seen.add(span.recipient_id)

    committed: set[object] = set()
    lock = threading.Lock()

    def tracked(request: TransferRequest, outcome: object) -> None:
        with lock:
            committed.add(request.partition.key)
            on_commit(request, outcome)  # type: ignore[arg-type]

    failures: list[SpanFailure] = []
    if len(firsts) > 1 and _can_fan_out(firsts):
        failures += _fan_out(firsts, staging_root=staging_root, on_commit=tracked, committed=committed)
    else:
        for span in firsts:
            failures += _run_alone(span.windows, staging_root=staging_root, on_commit=tracked, committed=committed)
    failed = {f.recipient_id for f in failures}
    for span in later:  # a recipient's later windows wait for its earlier ones, and fail with them
        if span.recipient_id in failed:
            failures.append(SpanFailure(span.recipient_id, span.windows, IncsyncError(
                f"recipient {span.recipient_id}: not run because an earlier window of this run failed"
            )))
            continue
        failures += _run_alone(span.windows, staging_root=staging_root, on_commit=tracked, committed=committed)
    return failures


def run_span(requests: Sequence[TransferRequest], *, staging_root: Path, on_commit: OnCommit) -> None:
    """One transfer over contiguous windows of one recipient: prepare, extract, stage once, publish.

    The staging folder is removed on the way out, success or not.
    """
    span = prepare(requests, staging_root=staging_root)
    with claim(span.staging):
        batch = extract_with_retries(span)
        publish_span(span, batch, on_commit=on_commit)


def run_transfer(request: TransferRequest, *, staging_root: Path) -> TransferOutcome:
    """One window alone (tests and tools): the span of a single partition."""
    outcomes: list[TransferOutcome] = []
    run_span([request], staging_root=staging_root, on_commit=lambda _r, o: outcomes.append(o))
    return outcomes[0]


def _uncommitted(requests: Sequence[TransferRequest], committed: set[object]) -> tuple[TransferRequest, ...]:
    return tuple(r for r in requests if r.partition.key not in committed)


def _run_alone(
    requests: Sequence[TransferRequest], *, staging_root: Path, on_commit: OnCommit, committed: set[object]
) -> list[SpanFailure]:
    """One span with its own read; a lost lease starts the uncommitted windows over from fresh state."""
    rid = requests[0].recipient.id
    remaining = tuple(requests)
    for attempt in range(1, LEASE_ATTEMPTS + 1):
        try:
            run_span(remaining, staging_root=staging_root, on_commit=on_commit)
            return []
        except LeaseError as exc:
            remaining = _uncommitted(remaining, committed)
            if attempt == LEASE_ATTEMPTS:
                return [SpanFailure(rid, remaining, exc)]
            log.warning("%s (attempt %s of %s; starting over from the new state)", exc, attempt, LEASE_ATTEMPTS)
        except Exception as exc:  # noqa: BLE001 - one recipient's failure is reported, the others go on
            return [SpanFailure(rid, _uncommitted(remaining, committed), exc)]
    raise AssertionError("unreachable")


def _can_fan_out(spans: Sequence[Span[TransferRequest]]) -> bool:
    first = spans[0].windows[0]
    return first.model.tenancy == "column" and first.source.supports_fan_out


def _fan_out(
    spans: Sequence[Span[TransferRequest]], *, staging_root: Path, on_commit: OnCommit, committed: set[object]
) -> list[SpanFailure]:
    failures: list[SpanFailure] = []
    prepared: list[PreparedSpan] = []

    def prepare_one(span: Span[TransferRequest]) -> PreparedSpan | SpanFailure:
        try:
            return prepare(span.windows, staging_root=staging_root)
        except Exception as exc:  # noqa: BLE001 - e.g. an unreachable destination fails its recipient only
            return SpanFailure(span.recipient_id, span.windows, exc)

    # Reading each destination's state is I/O (a Delta log, a PostgreSQL query): overlap them.
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_STATE_READS, len(spans))) as pool:
        for result in pool.map(prepare_one, spans):
            (failures if isinstance(result, SpanFailure) else prepared).append(result)  # type: ignore[arg-type]
    if not prepared:
        return failures
    first = prepared[0].first
    model, source = first.model, first.source
    targets = [(p.first.recipient, p.bounds) for p in prepared]
    shared = staging_root / f"{model.model_name}-fanout-{new_transfer_id()}"
    with claim(shared):
        def read() -> tuple[pa.Schema, dict[str, StagedBatch]]:
            # One safe horizon for the one read, before it: every recipient's HW stays below its cap.
            horizon = source.horizon(first.spark, model=model, recipient=first.recipient)
            for span in prepared:
                span.take_horizon(horizon)
            count = source.count_rows_many(model=model, targets=targets, cap=COLLECT_MAX_ROWS)
            df = source.read_many(first.spark(), model=model, targets=targets, rows_hint=count)
            assert model.organization_column is not None
            return stage_by_tenant(
                df, shared, model.organization_column, known_empty=count == 0,
                collect=count is not None and count <= COLLECT_MAX_ROWS,
            )

        try:
            schema, staged = with_retries(
                read, policy=first.retries, before_retry=lambda: remove(shared),
                what=f"fan-out read of source {model.source} for model {model.model_name} ({len(prepared)} recipients)",
            )
            _check_tenants(staged, prepared)
        except Exception as exc:  # noqa: BLE001 - the shared read failed: every recipient of it fails
            return failures + [SpanFailure(p.first.recipient.id, p.requests, exc) for p in prepared]
        log.info(
            "fan-out read of model %s: %s rows for %s recipients, staged once",
            model.model_name, sum(b.rows for b in staged.values()), len(prepared),
        )
        limits = _destination_limits(prepared)

        def publish(span: PreparedSpan) -> SpanFailure | None:
            with limits[span.first.destination.name]:
                try:
                    with claim(span.staging):
                        publish_span(span, _share_of(staged, schema, span), on_commit=on_commit)
                    return None
                except LeaseError:
                    # Another writer committed since this span read its state: redo it alone, from fresh state.
                    rest = _run_alone(_uncommitted(span.requests, committed), staging_root=staging_root,
                                      on_commit=on_commit, committed=committed)
                    return rest[0] if rest else None
                except Exception as exc:  # noqa: BLE001 - one recipient's failure is its own
                    return SpanFailure(span.first.recipient.id, _uncommitted(span.requests, committed), exc)

        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_PUBLISHES, len(prepared))) as pool:
            failures += [f for f in pool.map(publish, prepared) if f is not None]
    return failures


def _destination_limits(prepared: Sequence[PreparedSpan]) -> dict[str, threading.Semaphore]:
    limits: dict[str, threading.Semaphore] = {}
    for span in prepared:
        destination = span.first.destination
        if destination.name not in limits:
            limit = getattr(getattr(destination, "config", None), "max_concurrent_transfers", 1)
            limits[destination.name] = threading.Semaphore(max(1, int(limit)))
    return limits


def _check_tenants(staged: dict[str, StagedBatch], prepared: Sequence[PreparedSpan]) -> None:
    """Every staged row must belong to one of the run's recipients: a tenant value the database matched
    but incsync cannot (e.g. ``042`` against an integer 42) would otherwise be dropped silently."""
    model = prepared[0].first.model
    wanted = {p.first.recipient.id_in_provider_system for p in prepared}
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
    model, recipient = span.first.model, span.first.recipient
    mine = staged.get(recipient.id_in_provider_system)
    if mine is None:  # no row of this tenant in the read: an empty batch with the read's schema
        span.staging.mkdir(parents=True, exist_ok=True)
        return StagedBatch(path=span.staging, files=(), schema=schema, rows=0, bytes=0)
    lm = model.last_modified_column
    kind = mine.schema.field(lm).type
    within = (ds.field(lm) >= pa.scalar(span.bounds.lower, kind)) & (ds.field(lm) < pa.scalar(span.bounds.upper, kind))
    return filtered_batch(mine, span.staging, within | ds.field(lm).is_null())

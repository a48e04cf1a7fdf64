"""The read half of a run: what a model's asset body hands its IO manager (docs/design.md#dagster-shape).

``plan_reads`` coalesces a run's (window, recipient) partitions into spans (``plan.coalesce``) and opens a
read for each recipient's first span: the destination's state and the span's bounds (``prepare``), the
source's safe horizon, a pushed-down count, and the lazy Spark DataFrame over those bounds. No row is
read here: staging runs the query (``execute``). The first spans of a column-tenanted model's
recipients share ONE read (fan-out, each recipient with its own lower bound). A recipient's later
spans wait for its earlier ones to commit and are opened then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incsync.core.blame import SOURCE, on_side
from incsync.transfer.plan import Span, coalesce
from incsync.transfer.prepare import prepare
from incsync.transfer.request import PreparedSpan, SpanFailure, TransferRequest
from incsync.transfer.retries import with_retries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# Reads the source counts at up to this many rows come to Python through Arrow (df.toArrow()) and are
# written to staging here: a Spark write job has a fixed cost whatever its size, more than such a collect.
COLLECT_MAX_ROWS = 50_000
MAX_PARALLEL_STATE_READS = 8


@dataclass
class Read:
    """One pushed-down read: the prepared spans it serves (one, or every first span of a fan-out), the lazy
    DataFrame over their bounds and the rows the source counted in them (None: not counted)."""

    spans: list[PreparedSpan]
    dataframe: DataFrame
    count: int | None
    fan_out: bool = False

    @property
    def first(self) -> TransferRequest:
        return self.spans[0].first

    @property
    def known_empty(self) -> bool:
        """The source counted no row in bounds: staging runs no Spark job."""
        return self.count == 0

    @property
    def collect(self) -> bool:
        """Few enough rows to come to Python through Arrow rather than a Spark write job."""
        return self.count is not None and self.count <= COLLECT_MAX_ROWS

    @property
    def tenants(self) -> tuple[str, ...]:
        """The tenant values of a fan-out, in plan order: staging names each one's folder by its index here,
        never by the value (which may hold any character, and more bytes than a file name)."""
        return tuple(dict.fromkeys(p.first.recipient.id_in_provider_system for p in self.spans))

    @property
    def what(self) -> str:
        return _what(self.spans[0].requests, recipients=len(self.spans) if self.fan_out else None)


@dataclass
class RunReads:
    """What a model's asset returns: the run's opened reads, the spans that wait for a recipient's earlier
    ones, and the spans that failed before any read (e.g. a destination whose state could not be read)."""

    requests: tuple[TransferRequest, ...]
    reads: list[Read]
    later: list[Span[TransferRequest]]
    failures: list[SpanFailure]
    release: Callable[[], None] = lambda: None  # what the run holds while it reads and publishes (its slots)


def plan_reads(requests: Sequence[TransferRequest]) -> RunReads:
    """Plan the run's partitions into spans and open the read of every recipient's first span."""
    if not requests:
        return RunReads((), [], [], [])
    whole = frozenset(r.recipient.id for r in requests if r.full_refresh)
    firsts: list[Span[TransferRequest]] = []
    later: list[Span[TransferRequest]] = []
    seen: set[str] = set()
    for span in coalesce(list(requests), whole_recipient=whole):
        (later if span.recipient_id in seen else firsts).append(span)
        seen.add(span.recipient_id)
    reads: list[Read] = []
    failures: list[SpanFailure] = []
    if len(firsts) > 1 and _can_fan_out(firsts):
        prepared = _prepare_all(firsts, failures)
        if prepared:
            try:
                reads.append(with_retries(lambda: open_fan_out(prepared), policy=prepared[0].first.retries,
                                          what=_what(prepared[0].requests, recipients=len(prepared))))
            except Exception as exc:  # noqa: BLE001 - the shared read failed: every recipient of it fails
                failures += [SpanFailure(p.first.recipient.id, p.requests, exc) for p in prepared]
    else:
        for span in firsts:
            try:
                reads.append(open_span(span.windows))
            except Exception as exc:  # noqa: BLE001 - one recipient's failure is reported, the others go on
                failures.append(SpanFailure(span.recipient_id, span.windows, exc))
    return RunReads(tuple(requests), reads, later, failures)


def open_span(requests: Sequence[TransferRequest]) -> Read:
    """Prepare one span (state, bounds) and open its read."""
    span = prepare(requests)
    return with_retries(lambda: open_read(span), policy=span.first.retries, what=_what(span.requests))


def open_read(span: PreparedSpan) -> Read:
    """The span's read: the safe horizon first (the HW will not pass it: docs/design.md#safe-horizon),
    then a cheap count (a span with no row in bounds costs no Spark job, a small one a collect through
    Arrow), then the lazy DataFrame over the span's bounds."""
    first = span.first
    model, recipient, source = first.model, first.recipient, first.source
    with on_side(SOURCE, model.source):
        span.take_horizon(source.horizon(first.spark, model=model, recipient=recipient))
        count = source.count_rows(model=model, recipient=recipient, bounds=span.bounds, cap=COLLECT_MAX_ROWS)
        if count == 0:
            log.info("transfer %s: the source has no row in bounds; Spark staging skipped", span.transfer_id)
        df = source.read(first.spark(), model=model, recipient=recipient, bounds=span.bounds, rows_hint=count)
    return Read([span], df, count)


def open_fan_out(spans: list[PreparedSpan]) -> Read:
    """ONE read for the first spans of many recipients: one safe horizon before it (every recipient's HW
    stays below its cap), one count, one pushed-down query with each recipient's own bounds."""
    first = spans[0].first
    model, source = first.model, first.source
    with on_side(SOURCE, model.source):
        horizon = source.horizon(first.spark, model=model, recipient=first.recipient)
        for span in spans:
            span.take_horizon(horizon)
        targets = [(p.first.recipient, p.bounds) for p in spans]
        count = source.count_rows_many(model=model, targets=targets, cap=COLLECT_MAX_ROWS)
        df = source.read_many(first.spark(), model=model, targets=targets, rows_hint=count)
    return Read(spans, df, count, fan_out=True)


def reopen(read: Read) -> Read:
    """The same read asked of the source again (after a transient failure while it was staged)."""
    return open_fan_out(read.spans) if read.fan_out else open_read(read.spans[0])


def _what(requests: Sequence[TransferRequest], *, recipients: int | None = None) -> str:
    """The read as retries and errors name it."""
    model = requests[0].model
    if recipients is not None:
        return f"fan-out read of source {model.source} for model {model.model_name} ({recipients} recipients)"
    return f"read of source {model.source} for model {model.model_name}, recipient {requests[0].recipient.id}"


def _can_fan_out(spans: Sequence[Span[TransferRequest]]) -> bool:
    first = spans[0].windows[0]
    return first.model.tenancy == "column" and first.source.supports_fan_out


def _prepare_all(spans: Sequence[Span[TransferRequest]], failures: list[SpanFailure]) -> list[PreparedSpan]:
    """Every span's state and bounds; reading each destination's state is I/O (a Delta log, a PostgreSQL
    query), so they overlap. A destination that cannot be read fails its recipient only."""

    def prepare_one(span: Span[TransferRequest]) -> PreparedSpan | SpanFailure:
        try:
            return prepare(span.windows)
        except Exception as exc:  # noqa: BLE001 - e.g. an unreachable destination fails its recipient only
            return SpanFailure(span.recipient_id, span.windows, exc)

    prepared: list[PreparedSpan] = []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_STATE_READS, len(spans))) as pool:
        for result in pool.map(prepare_one, spans):
            (failures if isinstance(result, SpanFailure) else prepared).append(result)  # type: ignore[arg-type]
    return prepared

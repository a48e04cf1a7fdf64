"""The read half of a transfer plan (docs/design.md#transfer-plans).

``plan_reads`` opens a read for each recipient's first transfer of the plan: the destination's state and
the transfer's bounds (``prepare``), the source's safe horizon, a pushed-down count, and the lazy Spark
DataFrame over those bounds. No row is read here: staging runs the query (``execute``). The first
transfers of a column-tenanted model's recipients share ONE read (fan-out, each recipient with its own
lower bound). A recipient's later transfers wait for its earlier ones to commit and are opened then.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incsync.core.blame import SOURCE, on_side
from incsync.transfer.prepare import prepare
from incsync.transfer.request import PreparedSpan, SpanFailure, Transfer, TransferPlan, TransferRun
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
    """One pushed-down read of ``run``'s source: the prepared transfers it serves (one, or every first
    transfer of a fan-out), the lazy DataFrame over their bounds and the rows the source counted in them
    (None: not counted)."""

    run: TransferRun
    spans: list[PreparedSpan]
    dataframe: DataFrame
    count: int | None
    fan_out: bool = False

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
        return tuple(dict.fromkeys(p.transfer.recipient.id_in_provider_system for p in self.spans))

    @property
    def what(self) -> str:
        """The read as retries and errors name it."""
        model = self.run.model
        if self.fan_out:
            return f"fan-out read of source {model.source} for model {model.model_name} ({len(self.spans)} recipients)"
        [span] = self.spans
        return f"read of source {model.source} for {span.transfer.what}"


@dataclass
class RunReads:
    """A plan's opened reads, the transfers that wait for a recipient's earlier ones, and the transfers
    that failed before any read (e.g. a destination whose state could not be read)."""

    reads: list[Read]
    later: list[Transfer]
    failures: list[SpanFailure]


def plan_reads(plan: TransferPlan) -> RunReads:
    """Open the read of every recipient's first transfer of ``plan``."""
    firsts: list[Transfer] = []
    later: list[Transfer] = []
    seen: set[str] = set()
    for transfer in plan.transfers:
        (later if transfer.recipient.id in seen else firsts).append(transfer)
        seen.add(transfer.recipient.id)
    reads: list[Read] = []
    failures: list[SpanFailure] = []
    run = plan.run
    if len(firsts) > 1 and run.model.tenancy == "column" and run.source.supports_fan_out:
        prepared = _prepare_all(firsts, failures)
        if prepared:
            what = f"fan-out read of source {run.model.source} for model {run.model.model_name} ({len(prepared)} recipients)"
            try:
                reads.append(with_retries(lambda: open_fan_out(run, prepared), policy=run.retries, what=what))
            except Exception as exc:  # noqa: BLE001 - the shared read failed: every recipient of it fails
                failures += [SpanFailure.of(p.transfer, exc) for p in prepared]
    else:
        for transfer in firsts:
            try:
                reads.append(open_transfer(transfer))
            except Exception as exc:  # noqa: BLE001 - one recipient's failure is reported, the others go on
                failures.append(SpanFailure.of(transfer, exc))
    return RunReads(reads, later, failures)


def open_transfer(transfer: Transfer) -> Read:
    """Prepare one transfer (state, bounds) and open its read."""
    span = prepare(transfer)
    return with_retries(lambda: open_read(span), policy=transfer.run.retries,
                        what=f"read of source {transfer.model.source} for {transfer.what}")


def open_read(span: PreparedSpan) -> Read:
    """The transfer's read: the safe horizon first (the HW will not pass it: docs/design.md#safe-horizon),
    then a cheap count (a transfer with no row in bounds costs no Spark job, a small one a collect through
    Arrow), then the lazy DataFrame over the transfer's bounds."""
    transfer = span.transfer
    run, model, recipient = transfer.run, transfer.model, transfer.recipient
    with on_side(SOURCE, model.source):
        span.take_horizon(run.source.horizon(run.spark, model=model, recipient=recipient))
        count = run.source.count_rows(model=model, recipient=recipient, bounds=span.bounds, cap=COLLECT_MAX_ROWS)
        if count == 0:
            log.info("transfer %s: the source has no row in bounds; Spark staging skipped", span.transfer_id)
        df = run.source.read(run.spark(), model=model, recipient=recipient, bounds=span.bounds, rows_hint=count)
    return Read(run, [span], df, count)


def open_fan_out(run: TransferRun, spans: list[PreparedSpan]) -> Read:
    """ONE read for the first transfers of many recipients: one safe horizon before it (every recipient's
    HW stays below its cap), one count, one pushed-down query with each recipient's own bounds."""
    model, source = run.model, run.source
    with on_side(SOURCE, model.source):
        # The source's clock is one for every recipient of a column-tenanted model: asked once, as any of them.
        horizon = source.horizon(run.spark, model=model, recipient=spans[0].transfer.recipient)
        for span in spans:
            span.take_horizon(horizon)
        targets = [(p.transfer.recipient, p.bounds) for p in spans]
        count = source.count_rows_many(model=model, targets=targets, cap=COLLECT_MAX_ROWS)
        df = source.read_many(run.spark(), model=model, targets=targets, rows_hint=count)
    return Read(run, spans, df, count, fan_out=True)


def reopen(read: Read) -> Read:
    """The same read asked of the source again (after a transient failure while it was staged)."""
    return open_fan_out(read.run, read.spans) if read.fan_out else open_read(read.spans[0])


def _prepare_all(transfers: list[Transfer], failures: list[SpanFailure]) -> list[PreparedSpan]:
    """Every transfer's state and bounds; reading each destination's state is I/O (a Delta log, a PostgreSQL
    query), so they overlap. A destination that cannot be read fails its recipient only."""

    def prepare_one(transfer: Transfer) -> PreparedSpan | SpanFailure:
        try:
            return prepare(transfer)
        except Exception as exc:  # noqa: BLE001 - e.g. an unreachable destination fails its recipient only
            return SpanFailure.of(transfer, exc)

    prepared: list[PreparedSpan] = []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_STATE_READS, len(transfers))) as pool:
        for result in pool.map(prepare_one, transfers):
            if isinstance(result, SpanFailure):
                failures.append(result)
            else:
                prepared.append(result)
    return prepared

"""Extract a span's rows: the safe horizon first, a cheap count, then one pushed-down read staged once (DESIGN step 3-4)."""

from __future__ import annotations

import logging

from incsync.transfer.retries import with_retries
from incsync.staging.batch import StagedBatch
from incsync.staging.spark import stage
from incsync.staging.folders import remove
from incsync.transfer.request import PreparedSpan

log = logging.getLogger(__name__)

# Batches the source counts at up to this many rows come to Python through Arrow (df.toArrow()) and are
# written to staging here: a Spark write job costs 0.2-0.4 s whatever its size. ~100 bytes a row here.
COLLECT_MAX_ROWS = 50_000


def extract(span: PreparedSpan) -> StagedBatch:
    """Read the span's rows once (pushed down) and stage them in its private folder."""
    first = span.first
    model, recipient = first.model, first.recipient
    # The safe horizon, asked before anything is read: the HW will not pass it (DESIGN step 6).
    span.take_horizon(first.source.horizon(first.spark, model=model, recipient=recipient))
    # A cheap count first: a span with no row in bounds then costs no Spark job, a small one a collect
    # through Arrow instead of a Parquet write job (either batch is validated, counted and recorded alike).
    count = first.source.count_rows(model=model, recipient=recipient, bounds=span.bounds, cap=COLLECT_MAX_ROWS)
    if count == 0:
        log.info("transfer %s: the source has no row in bounds; Spark staging skipped", span.transfer_id)
    df = first.source.read(first.spark(), model=model, recipient=recipient, bounds=span.bounds, rows_hint=count)
    return stage(df, span.staging, known_empty=count == 0, collect=count is not None and count <= COLLECT_MAX_ROWS)


def extract_with_retries(span: PreparedSpan) -> StagedBatch:
    """``extract``, read again from the start (staging emptied) when the source fails transiently."""
    first = span.first
    return with_retries(
        lambda: extract(span), policy=first.retries, before_retry=lambda: remove(span.staging),
        what=f"read of source {first.model.source} for model {first.model.model_name}, recipient {first.recipient.id}",
    )

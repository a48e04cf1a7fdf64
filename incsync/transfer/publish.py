"""Publish a staged span: validate it, attribute its rows to windows, commit them batch by batch
(docs/design.md#validate, docs/design.md#publish)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from incsync.core.blame import DESTINATION, on_side
from incsync.core.bounds import Bounds, delta_threshold, from_micros, new_high_watermark, to_micros
from incsync.core.crashpoints import crash_point
from incsync.core.horizon import horizon_record
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, DestinationState, Removals, TransferRecord
from incsync.staging.batch import StagedBatch, slice_batch
from incsync.staging.folders import remove
from incsync.staging.infinity import refuse_infinities
from incsync.transfer.plan import plan_batches
from incsync.transfer.request import OnCommit, PreparedSpan, Transfer, TransferOutcome
from incsync.transfer.retries import with_retries
from incsync.transfer.span_scan import count_windows, keys_unique
from incsync.transfer.validate import validate_and_count

log = logging.getLogger(__name__)


def publish_span(span: PreparedSpan, batch: StagedBatch, *, on_commit: OnCommit) -> None:
    """Validate the span's rows, attribute them to windows, publish them in size-bounded commits in order.

    Every window lies in exactly one commit; ``on_commit`` hears of each window once its commit landed.
    """
    transfer = span.transfer
    run, model, recipient, destination = transfer.run, transfer.model, transfer.recipient, transfer.destination
    threshold = delta_threshold(span.previous_hw)
    # A full refresh delivers the recipient's whole span: each of its windows is recorded, not only the run's.
    requests = transfer.whole(span.bounds.upper) if span.reason else transfer.requests
    windows = tuple(r.partition for r in requests)
    # One pass over the last-modified column (NULLs refused first); then the other checks of the whole span.
    counts = count_windows(batch, windows, model=model, recipient_id=recipient.id,
                           delta_after_micros=None if threshold is None else to_micros(threshold))
    if not destination.capabilities.infinities:  # PostgreSQL's own ±infinity: only a kind that holds it as it is
        refuse_infinities(batch, model=model.model_name, recipient=recipient.id, key=list(model.primary_key),
                          destination=recipient.destination, kind=destination.kind)
    splits = [range(len(windows))] if span.reason else plan_batches(counts.rows, model.max_rows_per_batch)
    columns = tuple((f.name, str(f.type)) for f in batch.schema)
    removals = None
    if model.deletes != "none" and not span.reason:  # a full refresh replaces the rows anyway
        from incsync.transfer.deletes import find_removals

        removals = find_removals(run.source, destination, model=model, recipient=recipient, spark=run.spark,
                                 staging_root=span.staging, allowed=run.allow_mass_delete)  # in the span's claim
    hw, state = span.previous_hw, span.state
    # A recipient's first transfer split in commits (a big tenant's backfill) writes only keys the table
    # cannot hold yet, when no key occurs twice in the read: a destination may append instead of merging
    # (docs/design.md#first-transfers-append).
    new_keys = (len(splits) > 1 and state.last_transfer is None and state.reset_reason is None and removals is None
                and destination.capabilities.appends_new_keys and keys_unique(batch, model.primary_key))
    for k, indexes in enumerate(splits):
        lo, hi = indexes.start, indexes.stop - 1
        is_first, is_last = k == 0, k == len(splits) - 1
        lower = span.bounds.lower if is_first else windows[lo].start
        upper = span.bounds.upper if is_last else windows[hi].end
        part = batch if len(splits) == 1 else slice_batch(
            batch, span.staging / f"b{k + 1}", model.last_modified_column,  # in the span's claim: a crash leaves no stray
            lower=None if is_first else windows[lo].start, upper=None if is_last else windows[hi].end,
        )
        try:
            validate_and_count(part, model=model, recipient_id=recipient.id, delta_threshold=threshold)
        except Exception:
            if part is not batch:
                remove(part.path)
            raise
        crash_point("after_staging")
        tops = [m for m in counts.max_micros[lo : hi + 1] if m is not None]
        batch_max = from_micros(max(tops)) if tops else None
        previous = hw
        hw = new_high_watermark(hw, batch_max, span.cap.cap if span.cap else None)
        horizon_facts = horizon_record(
            span.horizon, span.cap, previous=previous, batch=part, column=model.last_modified_column, batch_max=batch_max
        ) if span.horizon and span.cap else {}
        transfer_id = span.transfer_id if len(splits) == 1 else f"{span.transfer_id}-b{k + 1}"
        record = TransferRecord(
            transfer_id=transfer_id,
            model_name=model.model_name,
            recipient_id=recipient.id,
            window_start=windows[lo].start.isoformat(),
            window_end=windows[hi].end.isoformat(),
            lower_bound=lower.isoformat(),
            upper_bound=upper.isoformat(),
            rows_transferred=sum(counts.rows[lo : hi + 1]),
            delta_rows_transferred=sum(counts.delta_rows[lo : hi + 1]),
            high_watermark_micros=None if hw is None else to_micros(hw),
            transfer_type=FULL_REFRESH if span.reason else INCREMENTAL,
            fingerprint=run.fingerprint,
            lookback_seconds=run.lookback_seconds,
            committed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            extra={**({"full_refresh_reason": span.reason} if span.reason else {}), **horizon_facts,
                   **({"rows_removed": str(removals.rows), "removal_mode": removals.mode} if removals and is_last else {})},
        )
        # Soft: every publish goes with its removals (even none), so a key back at the source loses its stamp.
        remove_now = removals if removals is not None and (removals.rows or removals.mode == "soft") and is_last else None
        try:
            destination_metadata = publish_with_retries(transfer, part, record, expected=state, removals=remove_now,
                                                        new_keys=new_keys)
            if removals is not None and is_last:
                destination_metadata = {**destination_metadata, "rows_removed": removals.rows, "removal_mode": removals.mode}
        finally:
            if part is not batch:
                remove(part.path)
        crash_point("after_publish")
        if not is_last:
            with on_side(DESTINATION, destination.name):
                state = destination.read_state(model=model, recipient=recipient)
        batch_bounds = Bounds(lower=lower, upper=upper, lookback_seconds=span.bounds.lookback_seconds, reason=span.bounds.reason)
        for i in indexes:
            window_record = replace(  # once a window: a backfill of many recipients has very many, so keep it cheap
                record,
                window_start=windows[i].start.isoformat(),
                window_end=windows[i].end.isoformat(),
                rows_transferred=counts.rows[i],
                delta_rows_transferred=counts.delta_rows[i],
                transfer_id=span.transfer_id,
            )
            on_commit(requests[i], TransferOutcome(
                record=window_record,
                bounds=batch_bounds,
                staged_bytes=part.bytes,
                duration_seconds=time.monotonic() - span.started,
                full_refresh_reason=span.reason,
                destination_metadata=destination_metadata,
                # What the commit's windows share goes once, with its last window (docs/design.md#bookkeeping).
                columns=columns if i == indexes[-1] else (),
                detailed=i == indexes[-1],
                record_window=windows[indexes[-1]],
                commit=record,
                windows_in_transfer=len(windows),
                batch=None if len(splits) == 1 else f"{k + 1}/{len(splits)}",
                commit_rows=record.rows_transferred,
                first_of_commit=i == lo,
                last_of_commit=i == indexes[-1],
            ))


def publish_with_retries(
    transfer: Transfer, batch: StagedBatch, record: TransferRecord, *, expected: DestinationState,
    removals: Removals | None = None, new_keys: bool = False,
) -> dict[str, object]:
    """Publish, trying again on a transient error. A connection lost while committing leaves it unknown
    whether the commit landed: the destination's transfer log says, so a landed commit is never redone."""
    model, recipient, destination = transfer.model, transfer.recipient, transfer.destination
    tries = 0

    def attempt() -> dict[str, object]:
        nonlocal tries
        tries += 1
        if tries > 1:
            landed = destination.read_state(model=model, recipient=recipient).last_transfer
            if landed is not None and landed.transfer_id == record.transfer_id:
                log.warning("transfer %s: its commit to %s landed before the connection was lost", record.transfer_id, destination.name)
                return {"publish_attempts": tries}
        return destination.publish(model=model, recipient=recipient, batch=batch, record=record, expected=expected,
                                   removals=removals, new_keys=new_keys)

    with on_side(DESTINATION, destination.name):
        metadata = with_retries(
            attempt, policy=transfer.run.retries,
            what=f"publish of transfer {record.transfer_id} to destination {destination.name} ({transfer.what})",
        )
    return {**metadata, "publish_attempts": tries} if tries > 1 else metadata

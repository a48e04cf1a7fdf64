"""Prepare a span before anything is read: destination state, bounds, transfer id, staging folder
(docs/design.md#state, docs/design.md#bounds)."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from incsync.core.blame import DESTINATION, on_side
from incsync.core.bounds import UTC, Bounds, compute_bounds, recipient_start
from incsync.core.transfer_id import new_transfer_id
from incsync.core.windows import open_window_end
from incsync.destinations.base import DestinationState
from incsync.transfer.request import PreparedSpan, Transfer, TransferRun
from incsync.transfer.retries import with_retries

log = logging.getLogger(__name__)


def full_refresh_reason(run: TransferRun, state: DestinationState) -> str | None:
    if run.full_refresh:
        return "requested"
    if state.reset_reason:  # data and transfer log disagree: never continue from a stale HW
        return state.reset_reason
    if state.last_transfer is not None and state.last_transfer.fingerprint != run.fingerprint:
        return f"model_changed ({state.last_transfer.fingerprint} -> {run.fingerprint})"
    return None


def span_bounds(transfer: Transfer, state: DestinationState) -> tuple[Bounds, datetime | None, str | None]:
    """The transfer's bounds from the destination's state: (bounds, the HW it continues from, full refresh reason)."""
    run, model = transfer.run, transfer.model
    start_r = recipient_start(model, transfer.recipient)
    reason = full_refresh_reason(run, state)
    if reason:
        previous_hw = None
        upper = max(transfer.end, open_window_end(model, datetime.now(UTC)))
        bounds = Bounds(lower=min(start_r, upper), upper=upper, lookback_seconds=run.lookback_seconds, reason="full_refresh")
    else:
        previous_hw = state.high_watermark
        bounds = compute_bounds(
            window_start=transfer.start,
            window_end=transfer.end,
            grid_start=run.grid_start,
            recipient_start=start_r,
            high_watermark=previous_hw,
            lookback_seconds=run.lookback_seconds,
            scheduled=run.scheduled,
        )
        if run.scheduled and state.last_transfer is None and transfer.start > max(start_r, run.grid_start):
            # A schedule tick finds no transfer record past the recipient's first window: a destination
            # wiped whole (folder, schema or prefix deleted) or a recipient whose backfill never ran.
            # Reading only this tick's windows would leave everything before them out, silently.
            reason = "no_transfer_record (the destination holds no transfer: re-synced from the recipient's start)"
    if reason and bounds.reason != "full_refresh":
        previous_hw = None
        upper = max(transfer.end, open_window_end(model, datetime.now(UTC)))
        bounds = Bounds(lower=min(start_r, upper), upper=upper, lookback_seconds=run.lookback_seconds, reason="full_refresh")
    return bounds, previous_hw, reason


def prepare(transfer: Transfer) -> PreparedSpan:
    """Read the destination's state and bound the transfer: ``[L(first window), U(last window))``.

    A full refresh reads ``[start, end of the open window)``: one transfer, published once. The
    transfer's staging folder is chosen when it is staged (``execute``).
    """
    model, recipient, destination = transfer.model, transfer.recipient, transfer.destination
    with on_side(DESTINATION, destination.name):
        state = with_retries(
            lambda: destination.read_state(model=model, recipient=recipient), policy=transfer.run.retries,
            what=f"reading destination {destination.name} for {transfer.what}",
        )
    bounds, previous_hw, reason = span_bounds(transfer, state)
    transfer_id = new_transfer_id()
    log.info(
        "transfer %s: model %s recipient %s, %s window(s) [%s, %s), bounds [%s, %s) (%s)",
        transfer_id, model.model_name, recipient.id, len(transfer.requests), transfer.start, transfer.end,
        bounds.lower, bounds.upper, bounds.reason,
    )
    return PreparedSpan(
        transfer=transfer, state=state, bounds=bounds, previous_hw=previous_hw, reason=reason,
        transfer_id=transfer_id, started=time.monotonic(),
    )

"""Which windows one run covers: a recipient's initial backfill, or a schedule tick."""

from __future__ import annotations

from datetime import datetime

from incsync.bounds import recipient_start
from incsync.config import ModelConfig, RecipientConfig
from incsync.partitions import grid_start


def initial_backfill_span(model: ModelConfig, recipient: RecipientConfig, now: datetime) -> tuple[datetime, datetime] | None:
    """From the recipient's start (never before the model's first window) to the open window at ``now``;
    None while that start lies in the future."""
    first = max(recipient_start(model, recipient), grid_start(model))
    return None if first > now else (first, now)


def tick_span(model: ModelConfig, *, previous_tick: datetime, tick: datetime) -> tuple[datetime, datetime] | None:
    """The window open at ``tick`` plus every window that closed after ``previous_tick``.

    A window ``[s, e)`` closed since the previous tick when ``previous_tick < e <= tick``: the
    earliest of them is the one holding ``previous_tick``. None before the model's grid starts.
    """
    start = grid_start(model)
    if tick < start:
        return None
    return max(previous_tick, start), tick

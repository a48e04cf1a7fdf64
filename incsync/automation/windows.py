"""Which windows one run covers: a recipient's initial backfill, or a schedule tick."""

from __future__ import annotations

from datetime import datetime

from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from incsync.config import ModelConfig, RecipientConfig
from incsync.partitions import grid_start, partition_key, window_key_for
from incsync.transfer import recipient_start


def range_tags(model: ModelConfig, recipient: RecipientConfig, first: datetime, last: datetime) -> dict[str, str]:
    """Run tags that make one run cover the recipient's windows holding ``first`` .. ``last``."""
    return {
        ASSET_PARTITION_RANGE_START_TAG: str(partition_key(window_key_for(model, first), recipient.id)),
        ASSET_PARTITION_RANGE_END_TAG: str(partition_key(window_key_for(model, last), recipient.id)),
    }


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

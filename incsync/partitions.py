"""The window × recipient partition grid of a model."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from incsync.bounds import UTC, from_epoch
from incsync.config import ModelConfig

RECIPIENTS_PARTITIONS = "recipients"
WINDOW_DIM = "window"
RECIPIENT_DIM = "recipient"

recipients_partitions = dg.DynamicPartitionsDefinition(name=RECIPIENTS_PARTITIONS)


def window_cron(seconds: int) -> str:
    """The cron whose ticks are the window boundaries (config validation guarantees a fit)."""
    if seconds == 86_400:
        return "0 0 * * *"
    minutes = seconds // 60
    if minutes < 60:
        return f"*/{minutes} * * * *" if minutes > 1 else "* * * * *"
    hours = minutes // 60
    return f"0 */{hours} * * *" if hours > 1 else "0 * * * *"


def window_format(seconds: int) -> str:
    return "%Y-%m-%d" if seconds == 86_400 else "%Y-%m-%d-%H:%M"


def window_partitions(model: ModelConfig) -> dg.TimeWindowPartitionsDefinition:
    """Windows from ``min_start_time_epoch``, including the current, still-open one."""
    return _windows(model.min_start_time_epoch, model.max_transfer_time_window_seconds)


@functools.lru_cache(maxsize=256)
def _windows(min_start_time_epoch: int, seconds: int) -> dg.TimeWindowPartitionsDefinition:
    return dg.TimeWindowPartitionsDefinition(
        start=from_epoch(min_start_time_epoch),
        cron_schedule=window_cron(seconds),
        fmt=window_format(seconds),
        timezone="UTC",
        end_offset=1,
    )


def model_partitions(model: ModelConfig) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition(
        {WINDOW_DIM: window_partitions(model), RECIPIENT_DIM: recipients_partitions}
    )


def partition_key(window: str, recipient: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({WINDOW_DIM: window, RECIPIENT_DIM: recipient})


@dataclass(frozen=True)
class WindowPartition:
    """One (window, recipient) cell of the grid with its time bounds."""

    key: dg.MultiPartitionKey
    window_key: str
    recipient_id: str
    start: datetime
    end: datetime


def split_key(model: ModelConfig, key: str | dg.MultiPartitionKey) -> WindowPartition:
    parts = model_partitions(model)
    mkey = key if isinstance(key, dg.MultiPartitionKey) else parts.get_partition_key_from_str(str(key))
    dims = mkey.keys_by_dimension
    tw = window_partitions(model).time_window_for_partition_key(dims[WINDOW_DIM])
    return WindowPartition(
        key=mkey,
        window_key=dims[WINDOW_DIM],
        recipient_id=dims[RECIPIENT_DIM],
        start=tw.start.astimezone(UTC),
        end=tw.end.astimezone(UTC),
    )


def grid_start(model: ModelConfig) -> datetime:
    """Start of the model's first window (the first boundary at or after min_start_time_epoch)."""
    return _grid_start(model.min_start_time_epoch, model.max_transfer_time_window_seconds)


@functools.lru_cache(maxsize=256)
def _grid_start(min_start_time_epoch: int, window_seconds: int) -> datetime:
    # Dagster walks the cron from the start: ~1 ms, paid per recipient by a sensor tick of 10,000.
    windows = _windows(min_start_time_epoch, window_seconds)
    first = windows.get_first_partition_key()
    if first is None:
        return from_epoch(min_start_time_epoch)
    return windows.time_window_for_partition_key(first).start.astimezone(UTC)


def window_key_for(model: ModelConfig, ts: datetime) -> str:
    """The window partition key holding ``ts`` (windows are aligned to the UTC epoch)."""
    seconds = model.max_transfer_time_window_seconds
    start = from_epoch(int(ts.timestamp()) // seconds * seconds)
    return start.strftime(window_format(seconds))

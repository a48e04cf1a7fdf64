"""How Dagster addresses a model's transfers: the model's asset key and its window × recipient partitions,
built on the grid of ``core.windows``. The definitions build the asset on them; launches and statuses
name and read runs by them."""

from __future__ import annotations

import functools

import dagster as dg

from incsync.config.model import ModelConfig
from incsync.core.bounds import from_epoch
from incsync.core.windows import WindowPartition, window_cron, window_format, window_of

RECIPIENTS_PARTITIONS = "recipients"
WINDOW_DIM = "window"
RECIPIENT_DIM = "recipient"

recipients_partitions = dg.DynamicPartitionsDefinition(name=RECIPIENTS_PARTITIONS)


def model_asset_key(model: ModelConfig) -> dg.AssetKey:
    return dg.AssetKey([model.source, model.model_name])


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


def dagster_key(partition: WindowPartition) -> dg.MultiPartitionKey:
    """The Dagster key of one (window, recipient) cell."""
    return partition_key(partition.window_key, partition.recipient_id)


def split_dims(model: ModelConfig, key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """The window key and recipient id a Dagster partition key names."""
    if isinstance(key, dg.MultiPartitionKey):
        dims = key.keys_by_dimension
    else:
        dims = model_partitions(model).get_partition_key_from_str(str(key)).keys_by_dimension
    return dims[WINDOW_DIM], dims[RECIPIENT_DIM]


def split_key(model: ModelConfig, key: str | dg.MultiPartitionKey) -> WindowPartition:
    """The (window, recipient) cell a Dagster partition key names."""
    window, recipient = split_dims(model, key)
    return WindowPartition(window=window_of(model, window), recipient_id=recipient)

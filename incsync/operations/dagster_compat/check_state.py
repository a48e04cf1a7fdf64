"""The asset check view of a partitioned check (the model's ``integrity``) at 10,000 recipients.

Dagster rebuilds a check's partition statuses from its execution records on every request and asks, for each
partition with a result, whether its recipient still exists: one query a recipient
(``asset_check_state._valid_partition_key`` through the request's ``CachingDynamicPartitionsLoader``), 38 s
for 10,000 recipients' results on a loaded 2-core host. incsync's event logs answer it with the recipients'
keys read once: 1.1-1.7 s. Private Dagster API, pinned by ``incsync_tests/integrity/test_integrity_partitions.py``.
"""

from __future__ import annotations

from typing import Any


class CheckStateAnswers:
    """Mixed in before Dagster's storage class, whose ``get_asset_check_state`` it wraps."""

    _instance: Any  # Dagster's storages hold the instance they serve

    def get_asset_check_state(self, keys: Any) -> Any:
        from dagster._core.definitions.partitions.context import partition_loading_context

        with partition_loading_context(dynamic_partitions_store=dynamic_key_sets(self._instance)):
            return super().get_asset_check_state(keys)  # type: ignore[misc]  # the storage class mixed in after


def dynamic_key_sets(instance: Any) -> Any:
    """A ``DynamicPartitionsStore`` that answers whether a key exists from its definition's whole key set,
    read once (one query a definition instead of one a key)."""
    from dagster._core.instance.types import CachingDynamicPartitionsLoader

    class DynamicKeySets(CachingDynamicPartitionsLoader):
        def __init__(self, instance: Any) -> None:
            super().__init__(instance)
            self._sets: dict[str, frozenset[str]] = {}

        def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
            keys = self._sets.get(partitions_def_name)
            if keys is None:
                keys = self._sets[partitions_def_name] = frozenset(self.get_dynamic_partitions(partitions_def_name))
            return partition_key in keys

    return DynamicKeySets(instance)

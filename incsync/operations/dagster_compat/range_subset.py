"""A run's output over a range of a model's partitions held as a ``GridSubset`` (per window, one bit mask over the
recipients), not as Dagster's set of every key. Private Dagster API (``dagster._core.execution.context.output``'s
``_key_range_to_subset``), pinned by ``incsync_tests/operations/test_range_subset.py``.

Dagster 1.13 builds each output's ``OutputContext`` with the asset's partitions of the run computed eagerly:
``partitions_def.empty_subset().with_partition_key_range(...)``, which for a ``MultiPartitionsDefinition`` is a
``DefaultPartitionsSubset`` of every key of the range, a ``MultiPartitionKey`` string and its dimensions' dict each
(~550 bytes a partition), held for the whole ``handle_output``, whether or not the IO manager asks for them. A
day-one run of 1,000 recipients × 395 windows would hold ~220 MB of them while it transfers
(benchmarks/HISTORY.md). Over a model's grid (``grid_subset.is_grid``) the same range is every window of the time
dimension's range for every recipient of the other dimension's range (``MultiPartitionsDefinition
.get_partition_keys_in_range`` is that product): a mask a window, the same keys, in memory that grows with the
windows. Any other partitions definition takes Dagster's own way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from dagster._core.definitions.partitions.definition import MultiPartitionsDefinition, PartitionsDefinition
from dagster._core.definitions.partitions.partition_key_range import PartitionKeyRange
from dagster._core.definitions.partitions.subset import PartitionsSubset
from dagster._core.definitions.partitions.utils.multi import MULTIPARTITION_KEY_DELIMITER

from incsync.operations.dagster_compat.grid_subset import GridSubset, Index, is_grid

_installed = False


class RangeGridSubset(GridSubset):
    """The partitions of one key range of a grid: its ranges are that range (Dagster's subset of the same keys
    would find it again from every key); anything derived from it is a plain ``GridSubset``."""

    def __init__(self, partitions_def: MultiPartitionsDefinition, index: Index, masks: dict[str, int],
                 key_range: PartitionKeyRange) -> None:
        super().__init__(partitions_def, index, masks)
        self.key_range = key_range

    def get_partition_key_ranges(self, partitions_def: PartitionsDefinition) -> Sequence[PartitionKeyRange]:
        return [self.key_range] if self.masks else []

    def get_partition_keys(self) -> Iterator[str]:
        """The keys as plain strings in Dagster's format (a ``MultiPartitionKey``'s text, equal to it): when the step
        ends Dagster lists the output's keys once more (``execute_step``'s ``partitions``, even for a run whose
        asset events its code reports), and a ``MultiPartitionKey`` with its dimensions' dict is ~550 bytes a key
        against ~70: a day-one run's Python grew by ~190 MB at its end."""
        first = self._primary_first
        for primary, mask in self.masks.items():
            for secondary in self.index.keys_of(mask):
                yield f"{primary}{MULTIPARTITION_KEY_DELIMITER}{secondary}" if first else (
                    f"{secondary}{MULTIPARTITION_KEY_DELIMITER}{primary}")


def grid_of_range(partitions_def: MultiPartitionsDefinition, key_range: PartitionKeyRange, store: Any) -> RangeGridSubset:
    """``partitions_def``'s keys in ``key_range`` (a grid: ``is_grid``) as masks; ``store``: the instance that
    holds the dynamic dimension's keys."""
    from dagster._core.definitions.partitions.context import partition_loading_context

    with partition_loading_context(dynamic_partitions_store=store):
        start = partitions_def.get_partition_key_from_str(key_range.start)
        end = partitions_def.get_partition_key_from_str(key_range.end)
        primary, secondary = partitions_def.primary_dimension, partitions_def.secondary_dimension
        windows = primary.partitions_def.get_partition_keys_in_range(
            PartitionKeyRange(start.keys_by_dimension[primary.name], end.keys_by_dimension[primary.name]))
        recipients = secondary.partitions_def.get_partition_keys_in_range(
            PartitionKeyRange(start.keys_by_dimension[secondary.name], end.keys_by_dimension[secondary.name]))
    index = Index(recipients)
    everyone = (1 << len(index.keys)) - 1
    return RangeGridSubset(partitions_def, index, dict.fromkeys(windows, everyone) if everyone else {}, key_range)


def install_range_subsets() -> None:
    """Make every ``OutputContext`` this process builds over a range of a model's grid hold it as masks
    (idempotent); any other partitions take Dagster's way."""
    global _installed
    if _installed:
        return
    from dagster._core.execution.context import output

    dagster_way = output._key_range_to_subset  # noqa: SLF001 - the one function get_output_context builds it with

    def _key_range_to_subset(key_range: PartitionKeyRange, partitions_def: PartitionsDefinition | None,
                             instance: Any) -> PartitionsSubset:
        if isinstance(partitions_def, MultiPartitionsDefinition) and is_grid(partitions_def) and instance is not None:
            return grid_of_range(partitions_def, key_range, instance)
        return dagster_way(key_range, partitions_def, instance)

    output._key_range_to_subset = _key_range_to_subset  # noqa: SLF001 - replaced by the grid-aware one above
    _installed = True

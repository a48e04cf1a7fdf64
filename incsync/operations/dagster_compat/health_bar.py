"""The asset page's health bar of a model's partitions held as ``GridSubset``s (``partition_status``): built per
run of windows that share their statuses, not by splitting every partition key as Dagster's
``build_multi_partition_ranges_generic`` does (5 s at 395,000 partitions). Each run's recipients are built by
Dagster's own ``build_partition_statuses``. Private Dagster API (``dagster_graphql``'s
``fetch_assets.get_2d_run_length_encoded_partitions``), pinned by ``incsync_tests/operations/test_partition_status.py``.
"""

from __future__ import annotations

from typing import Any

from incsync.operations.dagster_compat.grid_subset import GridSubset

_installed = False


def install_health_bar() -> None:
    """Make the GraphQL health bar of grid subsets (``assetPartitionStatuses``) run over windows, not partitions
    (idempotent; nothing when this process serves no GraphQL). Any other subsets take Dagster's own way."""
    global _installed
    if _installed:
        return
    _installed = True
    try:
        from dagster_graphql.implementation import fetch_assets
    except ImportError:
        return
    dagster_way = fetch_assets.get_2d_run_length_encoded_partitions

    def get_2d_run_length_encoded_partitions(store: Any, materialized: Any, failed: Any, in_progress: Any,
                                             partitions_def: Any) -> Any:
        if not all(isinstance(s, GridSubset) for s in (materialized, failed, in_progress)):
            return dagster_way(store, materialized, failed, in_progress, partitions_def)
        return health_bar(store, materialized, failed, in_progress, partitions_def)

    fetch_assets.get_2d_run_length_encoded_partitions = get_2d_run_length_encoded_partitions


def health_bar(store: Any, materialized: GridSubset, failed: GridSubset, in_progress: GridSubset, partitions_def: Any) -> Any:
    """``get_2d_run_length_encoded_partitions``: runs of consecutive windows whose recipients have the same
    statuses, each with its recipients' statuses as Dagster builds them (``build_partition_statuses``)."""
    from dagster._core.definitions.partitions.context import partition_loading_context
    from dagster._core.definitions.partitions.subset import DefaultPartitionsSubset
    from dagster_graphql.implementation.fetch_assets import build_partition_statuses
    from dagster_graphql.schema.pipelines.pipeline import GrapheneMultiPartitionRangeStatuses, GrapheneMultiPartitionStatuses

    primary = partitions_def.primary_dimension
    secondary_def = partitions_def.secondary_dimension.partitions_def
    grids = (materialized, failed, in_progress)
    ranges = []
    with partition_loading_context(dynamic_partitions_store=store):
        windows = list(primary.partitions_def.get_partition_keys())
        i = 0
        while i < len(windows):
            masks = tuple(g.masks.get(windows[i], 0) for g in grids)
            if not any(masks):
                i += 1
                continue
            j = i + 1
            while j < len(windows) and tuple(g.masks.get(windows[j], 0) for g in grids) == masks:
                j += 1
            subsets = [DefaultPartitionsSubset(set(materialized.index.keys_of(m))) for m in masks]
            start = primary.partitions_def.time_window_for_partition_key(windows[i])
            end = primary.partitions_def.time_window_for_partition_key(windows[j - 1])
            ranges.append(GrapheneMultiPartitionRangeStatuses(
                primaryDimStartKey=windows[i], primaryDimEndKey=windows[j - 1],
                primaryDimStartTime=start.start.timestamp(), primaryDimEndTime=end.end.timestamp(),
                secondaryDim=build_partition_statuses(store, *subsets, secondary_def)))
            i = j
    return GrapheneMultiPartitionStatuses(ranges=ranges, primaryDimensionName=primary.name)

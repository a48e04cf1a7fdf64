"""The partition status of a model's asset (materialized, failed, in progress) at 10,000 recipients × years of
windows, for the asset page's partition stats and health bar (docs/design.md#the-partition-view).

Dagster keeps an asset's partition status in the asset's row (``AssetStatusCacheValue``), updated from the
events since its cursor whenever a page asks. For a ``MultiPartitionsDefinition`` each subset is every
partition key, so at 3.95 M partitions each page parsed, compared, rewrote and stored ~80 MB of JSON, and the
health bar then split every key again (``build_multi_partition_ranges_generic``): 26-66 s a query.

incsync's event logs answer ``get_asset_status_cache_values`` for a grid-shaped asset (``grid_subset.is_grid``)
with the same status, computed by Dagster's own steps (``_build_status_cache``: the materializations since the
cursor, the failed and in-progress partitions from the planned events and their runs' statuses), held as
``GridSubset``s: per window a bit mask over the recipients. The status is kept in the instance's key-value
table (``incsync/partition-status/<asset key>``, ~3 KB when windows share their recipients), not in the asset's
row, which Dagster's own readers would parse. The health bar of such subsets is built per run of windows that
share their statuses (``install_health_bar``), with Dagster's own code for each run's recipients.
Private Dagster API, pinned by ``incsync_tests/operations/test_partition_status.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from incsync.operations.dagster_compat.grid_subset import GridSubset, Index, is_grid
from incsync.operations.dagster_compat.health_bar import install_health_bar

KEY_PREFIX = "incsync/partition-status/"
VERSION = 1
STATUSES = ("materialized", "failed", "in_progress")


def status_key(asset_key: Any) -> str:
    return KEY_PREFIX + asset_key.to_string()


def _value_class() -> type:
    from dagster._core.storage.partition_status_cache import AssetStatusCacheValue

    class GridStatusValue(AssetStatusCacheValue):
        """Dagster's cached status whose subsets are ``GridSubset``s (its serialized fields stay empty: the
        value lives in the key-value table, never in the asset's row)."""

        grids: dict[str, GridSubset]

        def _grid(self, status: str, partitions_def: Any) -> Any:
            if partitions_def.get_serializable_unique_identifier() != self.partitions_def_id:
                return partitions_def.empty_subset()
            return self.grids[status]

        def deserialize_materialized_partition_subsets(self, partitions_def: Any) -> Any:
            return self._grid("materialized", partitions_def)

        def deserialize_failed_partition_subsets(self, partitions_def: Any) -> Any:
            return self._grid("failed", partitions_def)

        def deserialize_in_progress_partition_subsets(self, partitions_def: Any) -> Any:
            return self._grid("in_progress", partitions_def)

    return GridStatusValue


_VALUE: type | None = None


def grid_status_value(latest_storage_id: int, partitions_def_id: str, grids: dict[str, GridSubset], earliest: int | None) -> Any:
    global _VALUE
    if _VALUE is None:
        _VALUE = _value_class()
    value = _VALUE(latest_storage_id, partitions_def_id, None, None, None, earliest)
    value.grids = grids
    return value


def status_cache_values(storage: Any, partitions_defs_by_key: Iterable[tuple[Any, Any]], context: Any,
                        dagster_way: Callable[[Sequence[tuple[Any, Any]]], Sequence[Any]]) -> list[Any]:
    """``EventLogStorage.get_asset_status_cache_values``: a grid-shaped asset's from ``partition_status``, any
    other asset's Dagster's way (``dagster_way``)."""
    from dagster._core.workspace.context import BaseWorkspaceRequestContext

    pairs = list(partitions_defs_by_key)
    others = [(k, p) for k, p in pairs if not is_grid(p)]
    theirs = iter(dagster_way(others) if others else [])
    loader = context.dynamic_partitions_loader if isinstance(context, BaseWorkspaceRequestContext) else None
    out = []
    for key, partitions_def in pairs:
        if is_grid(partitions_def):
            install_health_bar()  # this process shows grid subsets from now on
            out.append(partition_status(storage._instance, key, partitions_def, loader))  # noqa: SLF001 - the storage's instance
        else:
            out.append(next(theirs))
    return out


def partition_status(instance: Any, asset_key: Any, partitions_def: Any, dynamic_partitions_store: Any = None) -> Any:
    """The asset's partition status as ``get_and_update_asset_status_cache_value`` computes it, with grid subsets;
    stored back when it changed. None when the asset has no materialization nor planned one."""
    from dagster._core.definitions.partitions.context import partition_loading_context
    from dagster._core.storage.partition_status_cache import (
        build_failed_and_in_progress_partition_subset,
        get_last_planned_storage_id,
    )

    with partition_loading_context(None, dynamic_partitions_store or instance):
        record = next(iter(instance.get_asset_records(asset_keys=[asset_key])), None)
        last_materialization = record.asset_entry.last_materialization_storage_id if record else None
        last_planned = get_last_planned_storage_id(instance, asset_key, record)
        latest = max(last_materialization or 0, last_planned or 0)
        if not latest:
            return None
        details = record.asset_entry.asset_details if record else None
        wiped = details.last_wipe_timestamp if details else None
        definition = partitions_def.get_serializable_unique_identifier()
        raw = instance.run_storage.get_cursor_values({status_key(asset_key)}).get(status_key(asset_key))
        stored = _load(raw, partitions_def, definition, wiped)
        valid = _Validator(partitions_def)
        if stored is not None:
            cursor, grids, earliest = stored
            materialized, failed = grids["materialized"], grids["failed"]
            if last_materialization and last_materialization > cursor:
                new = valid(materialized.empty_subset(), materialized_since(instance.event_log_storage, asset_key, cursor,
                                                                           last_materialization))
                materialized, failed = materialized | new, failed - new
            in_progress_after: int | None = earliest - 1 if earliest else cursor
        else:
            index = Index(valid.secondary_keys())
            materialized = valid(GridSubset(partitions_def, index),
                                 materialized_since(instance.event_log_storage, asset_key, 0, last_materialization or 0))
            failed, in_progress_after = materialized.empty_subset(), None
        failed_any, in_progress_any, earliest = build_failed_and_in_progress_partition_subset(
            instance, asset_key, partitions_def, last_planned_materialization_storage_id=last_planned,
            failed_subset=failed if len(failed) else None, after_storage_id=in_progress_after)
        grids = {"materialized": materialized, "failed": _as_grid(materialized, failed_any),
                 "in_progress": _as_grid(materialized, in_progress_any)}
        text = _dump(latest, definition, wiped, grids, earliest)
        if text != raw and instance.event_log_storage.can_write_asset_status_cache():
            instance.run_storage.set_cursor_values({status_key(asset_key): text})
            if stored is None and record is not None and record.asset_entry.cached_status is not None:
                # Dagster's own status of the asset (every key, ~80 MB at 3.95 M partitions) is no longer read
                # by the page, but every read of the asset's row would still parse it: dropped once, when this
                # status is first built (an instance from before it). Dagster's daemons that keep their own
                # (an asset-page backfill's) may write it again; it is then left to them.
                instance.event_log_storage.wipe_asset_cached_status(asset_key)
        return grid_status_value(latest, definition, grids, earliest)


def _as_grid(like: GridSubset, subset: Any) -> GridSubset:
    return subset if isinstance(subset, GridSubset) and subset.index is like.index else like.empty_subset().with_partition_keys(
        subset.get_partition_keys())


class _Validator:
    """Keeps the partition keys valid in the definition now (``get_validated_partition_keys``), per dimension:
    Dagster's ``filter_valid_partition_keys`` builds a ``MultiPartitionKey`` per key."""

    def __init__(self, partitions_def: Any) -> None:
        self._primary = set(partitions_def.primary_dimension.partitions_def.get_partition_keys())
        self._secondary_def = partitions_def.secondary_dimension.partitions_def
        self._secondary: set[str] | None = None

    def secondary_keys(self) -> list[str]:
        return list(self._secondary_def.get_partition_keys())

    def __call__(self, into: GridSubset, keys: Iterable[str]) -> GridSubset:
        """``into`` with those of ``keys`` that are valid."""
        if self._secondary is None:
            self._secondary = set(self.secondary_keys())
        return into.with_valid_keys(keys, self._primary, self._secondary)


def _dump(cursor: int, definition: str, wiped: float | None, grids: dict[str, GridSubset], earliest: int | None) -> str:
    index = grids["materialized"].index
    masks: dict[int, int] = {}  # distinct masks: most windows share theirs
    statuses = {s: {w: masks.setdefault(m, len(masks)) for w, m in grids[s].masks.items()} for s in STATUSES}
    return json.dumps({"version": VERSION, "partitions_def": definition, "cursor": cursor, "wiped": wiped,
                       "earliest_in_progress": earliest, "secondary": index.keys,
                       "masks": [format(m, "x") for m in masks], **statuses}, separators=(",", ":"))


def _load(raw: str | None, partitions_def: Any, definition: str, wiped: float | None
          ) -> tuple[int, dict[str, GridSubset], int | None] | None:
    """The stored status, None when there is none or it is of another definition, format or wipe."""
    if not raw:
        return None
    doc = json.loads(raw)
    if doc.get("version") != VERSION or doc.get("partitions_def") != definition or doc.get("wiped") != wiped:
        return None
    index = Index(doc["secondary"])
    masks = [int(m, 16) for m in doc["masks"]]
    grids = {s: GridSubset(partitions_def, index, {w: masks[i] for w, i in doc[s].items()}) for s in STATUSES}
    return int(doc["cursor"]), grids, doc["earliest_in_progress"]


def attempts_without_materializations(storage: Any, asset_key: Any, after_storage_id: int | None = None) -> dict[str, tuple[str, int]]:
    """``get_latest_asset_partition_materialization_attempts_without_materializations``: each partition whose
    latest planned materialization (after ``after_storage_id``) no materialization followed, with its run and
    event id. Dagster's query reads the latest materialization of every partition to find the few planned ones
    (15 s at 390,000 partitions); this starts from the planned ones and looks up only their materializations,
    ``_PER_LOOKUP`` partitions a query, in the index on (asset, event type, partition, id). Plain lookups, not
    one query with a correlated ``NOT EXISTS``: PostgreSQL planned that one as a scan of every materialization
    per planned partition while the table's statistics were those of an empty table (260 s after a day one)."""
    import sqlalchemy as sa
    from dagster._core.events import DagsterEventType
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable

    table, key = SqlEventLogStorageTable, asset_key.to_string()
    details = storage._get_assets_details([asset_key])  # noqa: SLF001 - Dagster's wipe filter, as its own query
    wiped_too = storage._add_assets_wipe_filter_to_query  # noqa: SLF001 - as above

    def latest(event_type: DagsterEventType, partitions: list[str] | None) -> Any:
        query = (sa.select(table.c.partition, sa.func.max(table.c.id))
                 .where(table.c.asset_key == key, table.c.partition.isnot(None), table.c.dagster_event_type == event_type.value))
        if after_storage_id is not None:
            query = query.where(table.c.id > after_storage_id)
        if partitions is not None:
            query = query.where(table.c.partition.in_(partitions))
        return wiped_too(query.group_by(table.c.partition), details, [asset_key])

    with storage.index_connection() as conn:
        planned = {row[0]: int(row[1]) for row in conn.execute(latest(DagsterEventType.ASSET_MATERIALIZATION_PLANNED, None))}
        names = list(planned)
        for at in range(0, len(names), _PER_LOOKUP):
            query = latest(DagsterEventType.ASSET_MATERIALIZATION, names[at: at + _PER_LOOKUP])
            for partition, materialized in conn.execute(query):
                if planned[partition] < int(materialized):
                    del planned[partition]
        ids = sorted(planned.values())
        runs: dict[int, str] = {}
        for at in range(0, len(ids), _PER_LOOKUP):
            query = sa.select(table.c.id, table.c.run_id).where(table.c.id.in_(ids[at: at + _PER_LOOKUP]))
            runs.update((int(i), r) for i, r in conn.execute(query))
    return {partition: (runs[event_id], event_id) for partition, event_id in planned.items()}


_PER_LOOKUP = 500


ROWS_PER_READ = 100_000


def materialized_since(storage: Any, asset_key: Any, after: int, upto: int) -> Iterator[str]:
    """The partitions of the asset's materializations with ids in ``(after, upto]`` (each as often as it was
    materialized), read in id order ``ROWS_PER_READ`` at a time: ``get_materialized_partitions`` groups every
    partition's rows to find its latest id, which the status does not need (a day one's 3.95 M at once)."""
    import sqlalchemy as sa
    from dagster._core.events import DagsterEventType
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable

    table = SqlEventLogStorageTable
    details = storage._get_assets_details([asset_key])  # noqa: SLF001 - Dagster's wipe filter, as its own query
    while after < upto:
        query = (sa.select(table.c.id, table.c.partition)
                 .where(table.c.asset_key == asset_key.to_string(), table.c.partition.isnot(None),
                        table.c.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION.value,
                        table.c.id > after, table.c.id <= upto)
                 .order_by(table.c.id).limit(ROWS_PER_READ))
        query = storage._add_assets_wipe_filter_to_query(query, details, [asset_key])  # noqa: SLF001 - as above
        with storage.index_connection() as conn:
            rows = conn.execute(query).fetchall()
        if not rows:
            return
        after = int(rows[-1][0])
        yield from (row[1] for row in rows)


class PartitionStatusAnswers:
    """What incsync's event-log storages (SQLite and PostgreSQL) answer their own way for the asset page: a
    model's partition status kept as bit masks, and planned partitions found from the planned events up.
    Mixed in before Dagster's storage class, whose answers these fall back to."""

    def get_asset_status_cache_values(self, partitions_defs_by_key: Any, context: Any) -> Any:
        """A model's partition status kept as bit masks (``status_cache_values``), any other asset's Dagster's way."""
        parent = super().get_asset_status_cache_values  # type: ignore[misc]  # the storage class mixed in after
        return status_cache_values(self, partitions_defs_by_key, context, lambda pairs: parent(pairs, context))

    def get_latest_asset_partition_materialization_attempts_without_materializations(
        self, asset_key: Any, after_storage_id: int | None = None,
    ) -> Any:
        """Dagster's answer from the planned events up, not from every partition's materialization."""
        return attempts_without_materializations(self, asset_key, after_storage_id)


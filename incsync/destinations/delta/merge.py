"""The MERGE commits of a Delta publish: an incremental upsert that rewrites no unchanged row, and the
fixes of a repair or of removals (deleted, or stamped ``_incsync_deleted_at``) in one commit."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError

from incsync.config.model import ModelConfig
from incsync.destinations.base import DELETED_AT, Removals
from incsync.destinations.delta.batch import batch_reader, batch_table
from incsync.destinations.delta.cluster import cluster_range
from incsync.destinations.types import changed_kinds, delta_form
from incsync.errors import SchemaError
from incsync.staging.batch import StagedBatch

log = logging.getLogger(__name__)
T = TypeVar("T")

# The memory delta-rs's MERGE may hold before it spills to disk (DataFusion's pool), beside the batch
# itself (twice its decoded size: the join holds it). Without a bound, scattered changes to a big table
# hold every file they rewrite in memory, so a big tenant's MERGE would cost more memory than a small
# one's for the same change (benchmarks/big_tenant.py).
MERGE_MEMORY_FLOOR = 64 << 20


def merge_memory(batch: StagedBatch) -> int:
    """The MERGE's memory pool for ``batch``: the floor plus twice the batch's decoded size."""
    return MERGE_MEMORY_FLOOR + 2 * batch.decoded_bytes()


def _within_memory(run: Callable[[int | None], T], memory: int, *, what: str) -> T:
    """``run(memory)``; when the engine needs more than that for a part it cannot spill, ``run(None)``
    (no bound): a failed MERGE commits nothing, so running it again is safe, and a bound never fails a
    transfer. DataFusion says so with "Resources exhausted"."""
    try:
        return run(memory)
    except DeltaError as exc:
        if "resources exhausted" not in str(exc).lower():
            raise
        log.warning("%s needed more than its %s MB memory bound (%s); running it again without the bound",
                    what, memory >> 20, str(exc).splitlines()[0][:200])
        return run(None)


def _quote(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def merge(dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, props: CommitProperties) -> dict[str, object]:
    """Upsert the batch with the last-modified tie-break; a commit without data when nothing changed.

    Returns the files the MERGE read and skipped (``delta_files_scanned``, ``delta_files_skipped``) and,
    with ``cluster_by``, whether the cluster range pruned (``delta_cluster_fallback`` empty) or not (why)."""
    changed = changed_kinds(pa.schema(dt.schema().to_arrow()), delta_form(batch.schema))
    if changed:
        raise SchemaError(
            f"model {model.model_name}: {'; '.join(changed)} (docs/types.md says how each source type arrives); "
            "run a full refresh (--full-refresh) to rewrite the table with the new types"
        )
    before = dt.version()
    on = " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" + _key_range(batch, c) for c in model.primary_key)
    clustered, said = cluster_range(dt, model=model, batch=batch)
    newer = _newer_or_different(batch, model, existing=dt.schema().to_arrow().names)

    def run(memory: int | None) -> dict[str, object]:
        return (
            dt.merge(batch_reader(batch), predicate=on + clustered, source_alias="s", target_alias="t", merge_schema=True,
                     commit_properties=props, max_spill_size=memory)
            .when_matched_update_all(predicate=newer)
            .when_not_matched_insert_all()
            .execute()
        )

    metrics = _within_memory(run, merge_memory(batch), what=f"the MERGE of model {model.model_name}")
    if dt.version() == before:
        # Nothing changed: still record the transfer, in a commit of its own with no data.
        dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=props)
    return {"delta_files_scanned": int(metrics.get("num_target_files_scanned", 0)),
            "delta_files_skipped": int(metrics.get("num_target_files_skipped_during_scan", 0)), **said}


def merge_fixes(
    dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch, props: CommitProperties,
    removals: Removals | None, force: bool,
) -> None:
    """One MERGE commit: the batch's rows upserted (``force``: whatever their dates) and the removals'
    keys deleted, or stamped ``_incsync_deleted_at`` (the column is added by this same commit).

    Hard: an ``_incsync_op`` column tells upserts from removals and never reaches the table. Soft: the
    stamp itself does (set on removal rows only), so the source carries no other extra column."""
    rows = batch_table(batch)
    names = list(rows.schema.names)
    soft = removals is not None and removals.mode == "soft"
    marker = DELETED_AT if soft else "_incsync_op"
    marker_type = pa.timestamp("us", tz="UTC") if soft else pa.string()
    source = rows.append_column(pa.field(marker, marker_type), pa.nulls(rows.num_rows, marker_type))
    if removals is not None and removals.rows:
        keys = removals.keys.select(list(model.primary_key))
        gone = {n: pa.nulls(keys.num_rows, rows.schema.field(n).type) for n in names}
        for c in model.primary_key:
            gone[c] = keys[c].cast(rows.schema.field(c).type)
        value = removals.at if soft else "remove"
        gone[marker] = pa.array([value] * keys.num_rows, marker_type)
        source = pa.concat_tables([source, pa.table(gone, schema=source.schema)])
    columns = {_quote(n): f"s.{_quote(n)}" for n in names}
    if soft and DELETED_AT in dt.schema().to_arrow().names:
        columns[_quote(DELETED_AT)] = "NULL"  # a key back at the source is no longer deleted
    removal, upsert_only = f"s.{_quote(marker)} IS NOT NULL", f"s.{_quote(marker)} IS NULL"
    on = " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" for c in model.primary_key)
    stamped = DELETED_AT in dt.schema().to_arrow().names
    upsert = upsert_only + ("" if force else f" AND ({_newer_or_different(batch, model, existing=names)})")

    def run(memory: int | None) -> None:
        merger = dt.merge(source, predicate=on, source_alias="s", target_alias="t", commit_properties=props,
                          merge_schema=soft, max_spill_size=memory)  # soft: the stamp column joins the table in this commit
        if soft:
            merger = merger.when_matched_update({_quote(DELETED_AT): f"s.{_quote(DELETED_AT)}"},
                                                predicate=f"{removal} AND t.{_quote(DELETED_AT)} IS NULL" if stamped else removal)
        else:
            merger = merger.when_matched_delete(predicate=removal)
        merger.when_matched_update(columns, predicate=upsert).when_not_matched_insert(columns, predicate=upsert_only).execute()

    before = dt.version()
    _within_memory(run, MERGE_MEMORY_FLOOR + 2 * source.nbytes, what=f"the fixing MERGE of model {model.model_name}")
    if dt.version() == before:
        dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=props)


def _key_range(batch: StagedBatch, column: str) -> str:
    """`` AND t.k >= min AND t.k <= max`` of the batch's integer key: delta-rs prunes the files no
    changed key can be in before it joins (it still copies every row of each file it rewrites)."""
    if batch.rows == 0 or not pa.types.is_integer(batch.schema.field(column).type):
        return ""
    import pyarrow.compute as pc

    bounds = pc.min_max(batch.table(columns=[column])[column])
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None:
        return ""
    return f" AND t.{_quote(column)} >= {int(low)} AND t.{_quote(column)} <= {int(high)}"


def _newer_or_different(batch: StagedBatch, model: ModelConfig, *, existing: list[str]) -> str:
    """A row is replaced by a newer one, or by one as new whose values differ: replaying a batch (or
    a no-change lookback re-read) updates no row, so the MERGE rewrites no file and makes no commit.
    A column the table does not have yet (added at the source) differs where the batch holds a value."""
    lm = _quote(model.last_modified_column)
    others = [c for c in batch.schema.names if c not in model.primary_key and c != model.last_modified_column]
    if not others:
        return f"s.{lm} > t.{lm}"
    differ = " OR ".join(f"(s.{_quote(c)} IS DISTINCT FROM t.{_quote(c)})" if c in existing else f"(s.{_quote(c)} IS NOT NULL)"
                         for c in others)
    return f"s.{lm} > t.{lm} OR (s.{lm} = t.{lm} AND ({differ}))"

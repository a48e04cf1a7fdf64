"""A model's ``cluster_by`` in a Delta table: files ordered by (cluster columns, primary key), and a MERGE
that reads only the files whose range of the cluster columns meets the batch's.

delta-rs 1.6 rewrites only the files a MERGE matched a row in, but it reads (scans and joins) every
file its predicate's statistics cannot rule out. The key range rules out little when the keys a
recipient changes are scattered (random ids, changes that follow an account or a creation date);
the cluster columns' range does, once the files are ordered by them.

The MERGE matches on the key alone, plus ``t.c >= min AND t.c <= max`` of the batch's values of each
cluster column: a target row outside that range is never matched. That is right only while a key's
cluster value never changes (the contract: "immutable per key, like a creation date"). So before the
MERGE, :func:`cluster_range` looks for batch keys held by a row outside the range (reading the key and
cluster columns only); when it finds one, the MERGE runs without the range — every row matched by its
key, no duplicate ever — and the transfer's metadata and log say so (``delta_cluster_fallback``).
"""

from __future__ import annotations

import logging
import math
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from incsync.config.model import ModelConfig
from incsync.destinations.delta.batch import batch_reader, batch_table, crash_after
from incsync.errors import SchemaError
from incsync.staging.batch import StagedBatch

log = logging.getLogger(__name__)


def _quote(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def ordered(batch: StagedBatch, model: ModelConfig) -> pa.RecordBatchReader:
    """The batch as delta-rs writes it: ordered by (cluster columns, primary key) with ``cluster_by``
    (the batch is then held in memory to sort it, as a widening rewrite holds it), else as staged."""
    if not model.cluster_by:
        return batch_reader(batch)
    _check_columns(model, batch)
    rows = batch_table(batch)
    rows = rows.sort_by([(c, "ascending") for c in [*model.cluster_by, *model.primary_key]])
    return crash_after(pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches()))


def _check_columns(model: ModelConfig, batch: StagedBatch) -> None:
    if missing := [c for c in model.cluster_by or [] if c not in batch.schema.names]:
        raise SchemaError(f"model {model.model_name}: cluster_by column(s) {', '.join(missing)} are not among the "
                          f"columns read ({', '.join(batch.schema.names)}); fix the model's cluster_by")


def _literal(value: object) -> str | None:
    """A DataFusion literal of ``value``; None for a type the range does not cover."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    if isinstance(value, Decimal) and value.is_finite():
        return str(value)
    if isinstance(value, datetime | date):
        return "'" + value.isoformat() + "'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


def cluster_range(dt: DeltaTable, *, model: ModelConfig, batch: StagedBatch) -> tuple[str, dict[str, object]]:
    """The predicate's ``AND t.c >= low AND t.c <= high`` for each cluster column, and the metadata saying
    what it did; ``""`` (and why, in ``delta_cluster_fallback``) when a batch key's row lies outside it."""
    if not model.cluster_by or batch.rows == 0:
        return "", {}
    _check_columns(model, batch)
    columns = [c for c in model.cluster_by if c in dt.schema().to_arrow().names]
    if missing := [c for c in model.cluster_by if c not in columns]:  # added at the source since: its rows hold NULL
        return "", {"delta_cluster_fallback": f"the table has no column {', '.join(missing)} yet; merged by the key alone"}
    staged = batch.table(columns=list(dict.fromkeys([*model.primary_key, *columns])))
    clauses, outside = [], []
    for c in columns:
        bounds = pc.min_max(staged[c])
        low, high = _literal(bounds["min"].as_py()), _literal(bounds["max"].as_py())
        if low is None or high is None:
            continue  # all NULL, or a type without a literal: no range on this column
        field, nulls = ds.field(c), staged[c].null_count > 0
        inside = (field >= bounds["min"]) & (field <= bounds["max"])
        clause = f"t.{_quote(c)} >= {low} AND t.{_quote(c)} <= {high}"
        if nulls:  # a batch row with NULL there matches its row with NULL: keep those in the range
            inside, clause = inside | field.is_null(), f"({clause} OR t.{_quote(c)} IS NULL)"
        clauses.append(clause)
        outside.append(~inside if nulls else field.is_null() | ~inside)
    if not clauses:
        return "", {}
    moved = _moved_keys(dt, model=model, staged=staged, outside=outside)
    if moved:
        why = (f"{moved} key(s) of the batch are held by a row whose {', '.join(columns)} lies outside the batch's "
               f"range (cluster_by must never change for a key, docs/maintenance.md); merged by the key alone, "
               "reading every file the key range spans")
        log.warning("model %s: %s", model.model_name, why)
        return "", {"delta_cluster_fallback": why}
    return " AND " + " AND ".join(clauses), {"delta_cluster_fallback": ""}


def _moved_keys(dt: DeltaTable, *, model: ModelConfig, staged: pa.Table, outside: list[ds.Expression]) -> int:
    """How many of the batch's keys a table row outside the cluster range holds (only the key and cluster
    columns are read; files whose statistics put them inside the range are skipped by pyarrow)."""
    key = list(model.primary_key)
    anywhere = outside[0]
    for expression in outside[1:]:
        anywhere = anywhere | expression
    if len(key) == 1:
        wanted = ds.field(key[0]).isin(staged[key[0]].drop_null())
        found = dt.to_pyarrow_dataset().to_table(columns=key, filter=anywhere & wanted)
        return found.num_rows
    found = dt.to_pyarrow_dataset().to_table(columns=key, filter=anywhere)
    return found.join(staged.select(key).group_by(key).aggregate([]), keys=key, join_type="inner").num_rows

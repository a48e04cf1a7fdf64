"""Validate a staged batch (DESIGN step 5-6): primary key non-null and unique, last-modified non-null; its counts."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from incsync.config.model import ModelConfig
from incsync.errors import ValidationError
from incsync.staging.batch import StagedBatch

MAX_REPORTED_KEYS = 10


@dataclass(frozen=True)
class BatchFacts:
    """What validation learns on the way: counts and the batch's greatest last-modified."""

    rows: int
    delta_rows: int
    max_last_modified: datetime | None


def _names(columns: list[str]) -> str:
    """Column names as a user wrote them: ``(id)``, ``(org_id, id)``."""
    return "(" + ", ".join(columns) + ")"


def _keys_text(table: pa.Table, pk: list[str]) -> str:
    rows = table.select(pk).slice(0, MAX_REPORTED_KEYS).to_pylist()
    return ", ".join("(" + ", ".join(repr(r[c]) for c in pk) + ")" for r in rows)


def _refuse_null_last_modified(keys: pa.Table, *, model: ModelConfig, where: str) -> None:
    pk, lm = list(model.primary_key), model.last_modified_column
    null_lm = keys.filter(pc.is_null(keys[lm]))
    if null_lm.num_rows:
        raise ValidationError(
            f"{where}: {null_lm.num_rows} row(s) have a NULL last-modified column {lm} "
            f"(keys {_keys_text(null_lm, pk)}); nothing was published. Fix the source rows or the model."
        )


def check_last_modified(batch: StagedBatch, *, model: ModelConfig, recipient_id: str) -> None:
    """Refuse a batch holding NULL last-modified rows: such a row fits no window and no commit."""
    if batch.rows:
        keys = batch.table(columns=list(dict.fromkeys([*model.primary_key, model.last_modified_column])))
        _refuse_null_last_modified(keys, model=model, where=f"model {model.model_name}, recipient {recipient_id}")


def validate_and_count(
    batch: StagedBatch, *, model: ModelConfig, recipient_id: str, delta_threshold: datetime | None
) -> BatchFacts:
    """Primary key non-null and unique, last-modified non-null; then the counts (DESIGN step 5-6)."""
    pk, lm = list(model.primary_key), model.last_modified_column
    where = f"model {model.model_name}, recipient {recipient_id}"
    missing = [c for c in [*pk, lm] if c not in batch.schema.names]
    if missing:
        raise ValidationError(f"{where}: staged batch lacks columns {_names(missing)}; fix the model's primary_key/last_modified_column")
    if batch.rows == 0:
        return BatchFacts(rows=0, delta_rows=0, max_last_modified=None)
    keys = batch.table(columns=list(dict.fromkeys([*pk, lm])))

    # or_kleene takes two arguments: fold it over keys of any width.
    null_pk = keys.filter(functools.reduce(pc.or_kleene, [pc.is_null(keys[c]) for c in pk]))
    if null_pk.num_rows:
        raise ValidationError(
            f"{where}: {null_pk.num_rows} row(s) have a NULL primary key {_names(pk)} (e.g. {_keys_text(null_pk, pk)}); "
            "nothing was published. Fix the source rows or the model's primary_key."
        )
    _refuse_null_last_modified(keys, model=model, where=where)
    counts = keys.group_by(pk).aggregate([([], "count_all")])
    dupes = counts.filter(pc.greater(counts["count_all"], 1))
    if dupes.num_rows:
        raise ValidationError(
            f"{where}: {dupes.num_rows} primary key value(s) {_names(pk)} occur more than once in the batch: "
            f"{_keys_text(dupes.sort_by([(c, 'ascending') for c in pk]), pk)}; nothing was published. "
            "Fix the source or choose a primary_key that is unique."
        )
    lm_values = keys[lm]
    delta = keys.num_rows if delta_threshold is None else pc.sum(pc.greater(lm_values, pa.scalar(delta_threshold, lm_values.type))).as_py() or 0
    return BatchFacts(rows=keys.num_rows, delta_rows=int(delta), max_last_modified=pc.max(lm_values).as_py())


def keys_unique(batch: StagedBatch, primary_key: tuple[str, ...] | list[str]) -> bool:
    """Whether no primary key occurs twice in the whole batch (its key columns read once)."""
    if batch.rows == 0:
        return True
    pk = list(primary_key)
    keys = batch.table(columns=pk)
    if len(pk) == 1:
        return pc.count_distinct(keys[pk[0]], mode="all").as_py() == keys.num_rows
    return keys.group_by(pk).aggregate([]).num_rows == keys.num_rows

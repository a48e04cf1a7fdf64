"""Validate a staged batch: primary key non-null and unique, last-modified non-null; its counts
(docs/design.md#validate, docs/design.md#counts)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from incsync.config.model import ModelConfig
from incsync.errors import ValidationError
from incsync.staging.batch import SCAN_ROWS, StagedBatch
from incsync.transfer.keys import keys_unique

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


def refuse_null_last_modified(keys: pa.Table, *, model: ModelConfig, where: str) -> None:
    pk, lm = list(model.primary_key), model.last_modified_column
    null_lm = keys.filter(pc.is_null(keys[lm]))
    if null_lm.num_rows:
        raise ValidationError(
            f"{where}: {null_lm.num_rows} row(s) have a NULL last-modified column {lm} "
            f"(keys {_keys_text(null_lm, pk)}); nothing was published. Fix the source rows or the model."
        )


def missing_columns(batch: StagedBatch, *, model: ModelConfig, where: str) -> None:
    """Refuse a batch that lacks the model's key or last-modified column."""
    missing = [c for c in [*model.primary_key, model.last_modified_column] if c not in batch.schema.names]
    if missing:
        raise ValidationError(f"{where}: staged batch lacks columns {_names(missing)}; fix the model's primary_key/last_modified_column")


def validate_and_count(
    batch: StagedBatch, *, model: ModelConfig, recipient_id: str, delta_threshold: datetime | None,
    batch_size: int = SCAN_ROWS,
) -> BatchFacts:
    """Primary key non-null and unique, last-modified non-null; then the counts (docs/design.md#counts).

    Read a batch at a time (the key and last-modified columns) and the keys checked in 8 bytes a row
    (``keys_unique``): memory follows the read batch, not the commit. A batch that fails a check is read
    whole again to name the offending keys, as before.
    """
    pk, lm = list(model.primary_key), model.last_modified_column
    missing_columns(batch, model=model, where=f"model {model.model_name}, recipient {recipient_id}")
    if batch.rows == 0:
        return BatchFacts(rows=0, delta_rows=0, max_last_modified=None)
    rows, delta, top, clean = 0, 0, None, True
    for part in batch.batches(list(dict.fromkeys([*pk, lm])), batch_size=batch_size):
        if any(column.null_count for column in part.columns):
            clean = False
            break
        values = part.column(part.schema.get_field_index(lm))
        rows += part.num_rows
        if delta_threshold is not None:
            delta += pc.sum(pc.greater(values, pa.scalar(delta_threshold, values.type))).as_py() or 0
        high = pc.max(values).as_py()
        top = high if top is None or (high is not None and high > top) else top
    if clean and keys_unique(batch, pk, batch_size=batch_size):
        return BatchFacts(rows=rows, delta_rows=rows if delta_threshold is None else int(delta), max_last_modified=top)
    return _validate_in_memory(batch, model=model, recipient_id=recipient_id, delta_threshold=delta_threshold)


def _validate_in_memory(
    batch: StagedBatch, *, model: ModelConfig, recipient_id: str, delta_threshold: datetime | None
) -> BatchFacts:
    """The checks over the whole columns: they name the NULL or repeated keys."""
    pk, lm = list(model.primary_key), model.last_modified_column
    where = f"model {model.model_name}, recipient {recipient_id}"
    keys = batch.table(columns=list(dict.fromkeys([*pk, lm])))

    # or_kleene takes two arguments: fold it over keys of any width.
    null_pk = keys.filter(functools.reduce(pc.or_kleene, [pc.is_null(keys[c]) for c in pk]))
    if null_pk.num_rows:
        raise ValidationError(
            f"{where}: {null_pk.num_rows} row(s) have a NULL primary key {_names(pk)} (e.g. {_keys_text(null_pk, pk)}); "
            "nothing was published. Fix the source rows or the model's primary_key."
        )
    refuse_null_last_modified(keys, model=model, where=where)
    counts = keys.group_by(pk).aggregate([([], "count_all")])
    dupes = counts.filter(pc.greater(counts["count_all"], 1))
    if dupes.num_rows:
        raise ValidationError(
            f"{where}: {dupes.num_rows} primary key value(s) {_names(pk)} occur more than once in the batch: "
            f"{_keys_text(dupes.sort_by([(c, 'ascending') for c in pk]), pk)}; nothing was published. "
            "Fix the source or choose a primary_key that is unique."
        )
    lm_values = keys[lm]
    if delta_threshold is None:
        delta = keys.num_rows
    else:
        delta = pc.sum(pc.greater(lm_values, pa.scalar(delta_threshold, lm_values.type))).as_py() or 0
    return BatchFacts(rows=keys.num_rows, delta_rows=int(delta), max_last_modified=pc.max(lm_values).as_py())

"""``incsync repair``: re-transfer only what verify found wrong, as one commit with its transfer record.

The rows of missing, stale and incorrect keys come from the source rows verify already staged for the
buckets that differed (typed exactly as a transfer stages them) and replace the destination's rows of
those keys whatever their dates (a ``REPAIR`` record); orphaned keys are deleted, or stamped
``_incsync_deleted_at`` when the model says ``deletes: soft``, in the same commit; under ``deletes: none``
the rows that left the tenant are kept, and the result says so. The high watermark
and model fingerprint stay as they were, so the next transfer continues where the last one ended.
Object storage gets a ``REPAIR`` manifest whose delete file lists the keys it replaces and removes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.core.bounds import UTC, recipient_start, to_micros
from incsync.core.transfer_id import new_transfer_id
from incsync.destinations.base import REPAIR, Removals, TransferRecord
from incsync.destinations.registry import build_destination
from incsync.errors import IncsyncError
from incsync.integrity.compare import normalize
from incsync.integrity.verify import VerifyResult, verify_recipient
from incsync.staging.folders import remove
from incsync.staging.infinity import refuse_infinities
from incsync.staging.spark import stage
from incsync.transfer.deletes import check_fraction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class RepairResult:
    before: VerifyResult
    transfer_id: str | None = None
    rows_replaced: int = 0
    rows_removed: int = 0

    @property
    def rows_retained(self) -> int:
        return self.before.counts["total_rows_retained"]

    def line(self) -> str:
        b = self.before
        kept = "" if not self.rows_retained else (
            f"; kept {self.rows_retained} row(s) that are no longer the tenant's in the source (the model says "
            "deletes: none, which keeps them; deletes: hard or soft would remove them)")
        if self.transfer_id is None:
            return f"{b.model} {b.recipient}: nothing to repair{kept}"
        return (f"{b.model} {b.recipient}: repair transfer {self.transfer_id} replaced {self.rows_replaced} row(s) "
                f"(missing {b.counts['total_rows_missing']}, stale {b.counts['total_rows_stale']}, incorrect "
                f"{b.counts['total_rows_incorrect']}) and removed {self.rows_removed} orphaned row(s){kept}")


def repair_recipient(
    config: IncsyncConfig, model: ModelConfig, recipient: RecipientConfig, *, spark: Callable[[], SparkSession],
    staging_root: Path, allow_mass_delete: bool = False,
) -> RepairResult:
    found = verify_recipient(config, model, recipient, spark=spark, staging_root=staging_root, keep_rows=True)
    staged = found.source_rows
    try:
        if found.passed:
            return RepairResult(before=found)
        state = found.state
        if state is None or state.last_transfer is None:
            raise IncsyncError(f"model {model.model_name}, recipient {recipient.id}: the destination holds no transfer "
                               "yet; run `incsync transfer` (a backfill) instead of a repair")
        orphans = found.findings.orphaned_rows
        check_fraction(model, recipient, removing=len(orphans), rows=found.destination_rows, allowed=allow_mass_delete)
        assert staged is not None
        wrong = set(found.findings.to_retransfer)
        table = staged.table()
        keys = table.select(list(model.primary_key)).to_pylist()
        mask = [tuple(normalize(k[c]) for c in model.primary_key) in wrong for k in keys]
        rows = table.filter(pa.array(mask, pa.bool_())) if table.num_rows else table
        batch = stage(rows, staging_root / f"{staged.path.name}-fix")
        previous = state.last_transfer
        removals = None
        if orphans:
            names = list(model.primary_key)
            removals = Removals(keys=pa.Table.from_pylist(orphans).select(names),
                                mode="soft" if model.deletes == "soft" else "hard", at=datetime.now(UTC))
        hw = previous.high_watermark
        record = TransferRecord(
            transfer_id=new_transfer_id(), model_name=model.model_name, recipient_id=recipient.id,
            window_start=previous.window_start or recipient_start(model, recipient).isoformat(),
            window_end=previous.window_end or (hw or datetime.now(UTC)).isoformat(),
            lower_bound=recipient_start(model, recipient).isoformat(),
            upper_bound=(hw or datetime.now(UTC)).isoformat(),
            rows_transferred=batch.rows, delta_rows_transferred=0,
            high_watermark_micros=None if hw is None else to_micros(hw), transfer_type=REPAIR,
            fingerprint=previous.fingerprint, lookback_seconds=previous.lookback_seconds,
            committed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            extra={"repaired_missing": str(found.counts["total_rows_missing"]),
                   "repaired_stale": str(found.counts["total_rows_stale"]),
                   "repaired_incorrect": str(found.counts["total_rows_incorrect"]),
                   "removed_orphaned": str(len(orphans)), "removal_mode": removals.mode if removals else "none",
                   "kept_retained": str(found.counts["total_rows_retained"])},
        )
        destination = build_destination(config.destination(recipient.destination))
        try:
            if not destination.capabilities.infinities:  # PostgreSQL's own ±infinity: only a kind that holds it as it is
                refuse_infinities(batch, model=model.model_name, recipient=recipient.id, key=list(model.primary_key),
                                  destination=recipient.destination, kind=destination.kind)
            destination.publish(model=model, recipient=recipient, batch=batch, record=record, expected=state, removals=removals)
        finally:
            remove(batch.path)
        return RepairResult(before=found, transfer_id=record.transfer_id, rows_replaced=batch.rows, rows_removed=len(orphans))
    finally:
        if staged is not None:
            remove(staged.path)

__all__ = ["RepairResult", "repair_recipient"]

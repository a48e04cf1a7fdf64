"""Delete propagation (``deletes: hard | soft`` on a model): the keys a destination holds that the source
no longer has, found with verify's bucket fingerprints over the primary key alone, so a transfer reads
only the keys of the buckets that differ. The transfer then removes them in its own commit.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.config.tags import ALLOW_MASS_DELETE_TAG
from incsync.core.bounds import EPOCH, UTC
from incsync.destinations.base import Destination, Removals
from incsync.integrity.compare import key_of
from incsync.integrity.destination_side import DestinationSide
from incsync.integrity.source_side import FAR_FUTURE, SourceSide
from incsync.sources.base import Source
from incsync.transfer.errors import MassDeleteError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def check_fraction(model: ModelConfig, recipient: RecipientConfig, *, removing: int, rows: int, allowed: bool) -> None:
    if removing > model.max_delete_fraction * max(rows, 1) and not allowed:
        raise MassDeleteError(
            f"model {model.model_name}, recipient {recipient.id}: would remove {removing} of {rows} destination rows, "
            f"more than max_delete_fraction {model.max_delete_fraction}; nothing was published. Check the source (a "
            "wrong tenant or an emptied table looks like this), then re-run with --allow-mass-delete "
            f"(tag {ALLOW_MASS_DELETE_TAG}=true)"
        )


def find_removals(
    source: Source, destination: Destination, *, model: ModelConfig, recipient: RecipientConfig,
    spark: Callable[[], SparkSession], staging_root: Path, allowed: bool,
) -> Removals | None:
    """The destination's keys absent from the source, as the model's ``deletes`` mode removes them."""
    if model.deletes == "none":
        return None
    src = SourceSide(source, model=model, recipient=recipient, spark=spark)
    dst = DestinationSide(destination, model=model, recipient=recipient)
    dst_kinds = dst.columns()
    if not dst_kinds:
        return None
    src_kinds = src.columns()
    pk = list(model.primary_key)
    from incsync.integrity.verify import bucket_count

    rows = dst.row_estimate()
    buckets = bucket_count(rows)
    theirs = src.fingerprints(src_kinds, pk, buckets=buckets, checked=buckets, start=EPOCH, hw=FAR_FUTURE)
    ours = dst.fingerprints(dst_kinds, pk, buckets=buckets, checked=buckets)
    differing = [b for b in range(buckets) if ours.counts.get(b, 0) and not theirs.same(ours, b)]
    if not differing:
        return Removals(keys=pa.table({}), mode=model.deletes)
    path = staging_root / f"{model.model_name}-{recipient.id}-deletes-{uuid.uuid4().hex[:12]}"
    try:
        present = {key_of(r, pk) for r in src.rows(src_kinds, buckets=buckets, which=differing, path=path).table(columns=pk).to_pylist()}
    finally:
        shutil.rmtree(path, ignore_errors=True)
    gone = [{c: r[c] for c in pk} for r in dst.rows(dst_kinds, buckets=buckets, which=differing) if key_of(r, pk) not in present]
    check_fraction(model, recipient, removing=len(gone), rows=rows, allowed=allowed)
    keys = pa.Table.from_pylist(gone) if gone else pa.table({})
    return Removals(keys=keys, mode=model.deletes, at=datetime.now(UTC))

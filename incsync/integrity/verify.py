"""Verify a recipient's copy against its source without reading all of it twice (``incsync verify``).

The recipient's rows are split into buckets of the key space; source and destination each compute,
in their own engine, a fingerprint per bucket (row count, sum of row hashes over primary key,
last-modified and every compared column: ``incsync.core.canonical``); only the buckets whose
fingerprints differ are read row by row and compared on typed values (``incsync.integrity.compare``).
Source rows in scope are those with ``recipient start <= last-modified <= HW``; newer ones are pending.
Under ``deletes: none`` the destination's rows the source no longer has for the tenant (deleted, or
moved to another tenant) are kept on purpose: counted as retained, never failing the check.
A sampling rate below 1 checks the first ``ceil(rate * buckets)`` buckets: a deterministic subset,
uniform over keys because buckets are hashes.
"""

from __future__ import annotations

import math
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.core.bounds import recipient_start
from incsync.destinations.base import DestinationState
from incsync.destinations.registry import build_destination
from incsync.errors import InputError
from incsync.integrity.compare import RowFindings, compare_rows
from incsync.integrity.destination_side import DestinationSide
from incsync.integrity.source_side import SourceSide
from incsync.sources.registry import build_source
from incsync.staging.batch import StagedBatch
from incsync.staging.infinity import python_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COUNTERS = ("total_rows_compared", "total_rows_pending", "total_rows_stale", "total_rows_missing",
            "total_rows_incorrect", "total_rows_orphaned", "total_rows_retained")
FAILING = ("total_rows_missing", "total_rows_stale", "total_rows_incorrect", "total_rows_orphaned")
ROWS_PER_BUCKET = 256
MAX_PENDING_KEYS = 100_000  # more changes waiting than this: their buckets are compared row by row instead
MIN_BUCKETS, MAX_BUCKETS = 16, 1 << 16


def bucket_count(rows: int) -> int:
    """A power of two giving ~``ROWS_PER_BUCKET`` rows a bucket: one wrong row costs reading that many."""
    wanted = max(1, math.ceil(rows / ROWS_PER_BUCKET))
    return min(MAX_BUCKETS, max(MIN_BUCKETS, 1 << (wanted - 1).bit_length()))


def checked_buckets(buckets: int, sampling_rate: float) -> int:
    if not 0 < sampling_rate <= 1:
        raise InputError(f"--sampling-rate {sampling_rate}: give a fraction in (0, 1]")
    return max(1, math.ceil(buckets * sampling_rate))


@dataclass
class VerifyResult:
    """Prequel's integrity-check fields for one (model, recipient), plus what repair needs."""

    model: str
    recipient: str
    destination: str
    sampling_rate: float
    buckets: int
    buckets_checked: int
    buckets_differing: int
    high_watermark: str | None
    deletes: str = "none"  # the model's mode: under none, rows that left the tenant are retained, not orphaned
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    findings: RowFindings = field(default_factory=RowFindings)
    columns_not_compared: list[str] = field(default_factory=list)
    destination_rows: int = 0
    source_reads: int = 0
    duration_seconds: float = 0.0
    state: DestinationState | None = None
    source_rows: StagedBatch | None = None  # the differing buckets' source rows, staged (repair publishes from them)

    @property
    def passed(self) -> bool:
        return all(self.counts[c] == 0 for c in FAILING)

    def metadata(self) -> dict[str, Any]:
        """The check's metadata: the counters, the sample, and a few example keys per failing counter."""
        out: dict[str, Any] = {"sampling_rate": self.sampling_rate, **self.counts, "buckets": self.buckets,
                               "buckets_checked": self.buckets_checked, "buckets_differing": self.buckets_differing,
                               "high_watermark": self.high_watermark or "none", "deletes": self.deletes}
        if self.columns_not_compared:
            out["columns_not_compared"] = ", ".join(self.columns_not_compared)
        for counter, examples in self.findings.examples.items():
            out[f"examples_{counter}"] = "; ".join(examples)
        return out

    def line(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        sample = "" if self.buckets_checked == self.buckets else (
            f" (sampled {self.buckets_checked} of {self.buckets} buckets: sampling_rate {self.sampling_rate})")
        counts = " ".join(f"{c.removeprefix('total_rows_')}={self.counts[c]}" for c in COUNTERS)
        return f"{status} {self.model} {self.recipient} -> {self.destination}: {counts}{sample}"


def verify_recipient(
    config: IncsyncConfig, model: ModelConfig, recipient: RecipientConfig, *, spark: Callable[[], SparkSession],
    sampling_rate: float = 1.0, staging_root: Path, keep_rows: bool = False,
) -> VerifyResult:
    """Compare one recipient's source rows in scope with its destination; see the module docstring."""
    import time

    started = time.monotonic()
    destination = build_destination(config.destination(recipient.destination))
    source = build_source(config.source(model.source))
    state = destination.read_state(model=model, recipient=recipient)
    hw = state.high_watermark
    start = recipient_start(model, recipient)
    src = SourceSide(source, model=model, recipient=recipient, spark=spark)
    dst = DestinationSide(destination, model=model, recipient=recipient)
    with ThreadPoolExecutor(max_workers=2) as pool:
        src_kinds_f = pool.submit(src.columns)
        dst_kinds = dst.columns()
        estimate = dst.row_estimate()
        src_kinds = src_kinds_f.result()
    compared = sorted(c for c in src_kinds if c in dst_kinds)
    buckets = bucket_count(estimate)
    checked = checked_buckets(buckets, sampling_rate)
    result = VerifyResult(
        model=model.model_name, recipient=recipient.id, destination=recipient.destination, sampling_rate=sampling_rate,
        buckets=buckets, buckets_checked=checked, buckets_differing=0, high_watermark=hw.isoformat() if hw else None,
        deletes=model.deletes,
        columns_not_compared=sorted(c for c in src_kinds if c not in dst_kinds) if dst_kinds else [], state=state,
        destination_rows=estimate,
    )
    dst.skip_keys(src.pending_keys(src_kinds, start=start, hw=hw, limit=MAX_PENDING_KEYS))
    # Source and copy in one engine: both may use its own faster hash.
    native = destination.capabilities.native_hashing == source.vendor
    with ThreadPoolExecutor(max_workers=2) as pool:
        src_fp_f = pool.submit(src.fingerprints, src_kinds, compared or sorted(src_kinds), buckets=buckets,
                               checked=checked, start=start, hw=hw, native=native)
        dst_fp = dst.fingerprints(dst_kinds, compared, buckets=buckets, checked=checked, native=native)
        src_fp = src_fp_f.result()
    result.counts["total_rows_compared"] = sum(src_fp.counts.values())
    result.counts["total_rows_pending"] = sum(src_fp.pending.values())
    differing = [b for b in range(checked) if not src_fp.same(dst_fp, b)]
    result.buckets_differing = len(differing)
    if differing:
        path = staging_root / f"{model.model_name}-{recipient.id}-verify-{uuid.uuid4().hex[:12]}"
        batch = src.rows(src_kinds, buckets=buckets, which=differing, path=path)
        try:
            found = compare_rows(
                python_rows(batch.table()), dst.rows(dst_kinds, buckets=buckets, which=differing),
                primary_key=list(model.primary_key), last_modified=model.last_modified_column,
                values=[c for c in compared if c not in model.primary_key and c != model.last_modified_column],
                start_micros=_micros(start), hw_micros=_micros(hw) if hw else None,
                retain_orphans=model.deletes == "none",
            )
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        result.findings = found
        for counter in ("missing", "stale", "incorrect", "orphaned", "retained"):
            result.counts[f"total_rows_{counter}"] = len(getattr(found, counter))
        if keep_rows:
            result.source_rows = batch
        else:
            shutil.rmtree(path, ignore_errors=True)
    result.source_reads = src.reads
    result.duration_seconds = round(time.monotonic() - started, 3)
    return result


def _micros(ts: Any) -> int:
    from incsync.core.bounds import to_micros

    return to_micros(ts)


def recipients_of(config: IncsyncConfig, model: ModelConfig, ids: list[str] | None) -> list[RecipientConfig]:
    """The recipients named (each must receive ``model``), else every enabled one that receives it."""
    from incsync.config.products import not_received, receives, subscribers
    from incsync.errors import NotSubscribedError

    if not ids:
        return subscribers(config, model.model_name)
    named = [config.recipient(r) for r in dict.fromkeys(ids)]
    if refused := [r for r in named if not receives(config, r, model.model_name)]:
        raise NotSubscribedError("\n".join(not_received(config, r, model.model_name) for r in refused))
    return named

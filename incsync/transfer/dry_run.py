"""`incsync transfer --dry-run`: what a transfer would read, for whom, within which bounds — writing nothing.

Each recipient's destination state is read (as the transfer would) and its bounds computed by the same
code (``prepare.span_bounds``); rows are estimated by a cheap count where the source has one (PostgreSQL
through psycopg, Parquet lake tables through their footers' statistics and a pyarrow scan), never Spark.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.sources import LakeSourceConfig

if TYPE_CHECKING:
    from incsync.core.bounds import Bounds
    from incsync.sources.base import Source


ESTIMATE_CAP = 1_000_000_000
MAX_PARALLEL = 8


@dataclass(frozen=True)
class DryRunTransfer:
    recipient: str
    destination: str
    windows: list[str]
    lower: datetime
    upper: datetime
    bounds_reason: str
    high_watermark: datetime | None
    full_refresh_reason: str | None
    estimated_rows: int | None

    def as_dict(self) -> dict[str, object]:
        return {
            "recipient": self.recipient, "destination": self.destination, "windows": len(self.windows),
            "first_window": self.windows[0], "last_window": self.windows[-1],
            "lower_bound": self.lower.isoformat(), "upper_bound": self.upper.isoformat(),
            "bounds_reason": self.bounds_reason,
            "high_watermark": None if self.high_watermark is None else self.high_watermark.isoformat(),
            "full_refresh_reason": self.full_refresh_reason, "estimated_rows": self.estimated_rows,
        }


def _no_spark() -> NoReturn:
    raise AssertionError("a dry run does not start Spark")


def dry_run_transfers(
    config: IncsyncConfig, model: ModelConfig, recipients: list[RecipientConfig], windows: dict[str, list[str]],
    *, scheduled: bool, full_refresh: bool,
) -> list[DryRunTransfer]:
    from incsync.destinations.registry import build_destination
    from incsync.sources.registry import build_source
    from incsync.transfer.prepare import span_bounds
    from incsync.transfer.request import Transfer, TransferRun

    run = TransferRun.for_model(config, model, source=build_source(config.source(model.source)), spark=_no_spark,
                                scheduled=scheduled, full_refresh=full_refresh)

    def one(recipient: RecipientConfig) -> DryRunTransfer:
        destination = build_destination(config.destination(recipient.destination))
        keys = windows[recipient.id]
        transfer = Transfer(run, recipient, destination, tuple(run.request(recipient, destination, k) for k in keys))
        state = destination.read_state(model=model, recipient=recipient)
        bounds, previous_hw, reason = span_bounds(transfer, state)
        return DryRunTransfer(
            recipient=recipient.id, destination=destination.name, windows=keys, lower=bounds.lower, upper=bounds.upper,
            bounds_reason=bounds.reason, high_watermark=previous_hw, full_refresh_reason=reason,
            estimated_rows=estimate_rows(config, model, recipient, bounds, run.source),
        )

    todo = [r for r in recipients if windows.get(r.id)]
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(todo)))) as pool:
        return list(pool.map(one, todo))


def estimate_rows(config: IncsyncConfig, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds, source: Source) -> int | None:
    """Rows in bounds by a cheap count, or None when the source offers none."""
    source_config = config.source(model.source)
    if isinstance(source_config, LakeSourceConfig):
        return _lake_count(source_config, model, recipient, bounds)
    try:
        return source.count_rows(model=model, recipient=recipient, bounds=bounds, cap=ESTIMATE_CAP)
    except Exception:  # noqa: BLE001 - an estimate is optional
        return None


def _lake_count(source: LakeSourceConfig, model: ModelConfig, recipient: RecipientConfig, bounds: Bounds) -> int | None:
    if source.format != "parquet" or not source.path or "://" in source.path or not model.source_table:
        return None
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from incsync.core.sql_text import split_qualified

    parts = split_qualified(model.source_table) or [model.source_table]
    if model.tenancy == "schema":
        parts = [recipient.id_in_provider_system, *parts]
    folder = Path(source.path).joinpath(*parts)
    try:
        dataset = ds.dataset(str(folder), format="parquet")
        lm = dataset.schema.field(model.last_modified_column)
        if not pa.types.is_timestamp(lm.type):
            return None
        kind = lm.type if lm.type.tz else pa.timestamp(lm.type.unit)
        lower = bounds.lower if lm.type.tz else bounds.lower.replace(tzinfo=None)
        upper = bounds.upper if lm.type.tz else bounds.upper.replace(tzinfo=None)
        where = (ds.field(lm.name) >= pa.scalar(lower, kind)) & (ds.field(lm.name) < pa.scalar(upper, kind))
        if model.organization_column:
            org = dataset.schema.field(model.organization_column)
            value = pc.cast(pa.scalar(recipient.id_in_provider_system), org.type)
            where = where & (ds.field(org.name) == value)
        return int(dataset.count_rows(filter=where))
    except Exception:  # noqa: BLE001 - an estimate is optional
        return None


def dry_run_lines(model: ModelConfig, planned: list[DryRunTransfer], *, mode: str, runs: int) -> list[str]:
    lines = [f"dry run: transfer {model.model_name} ({mode}), {len(planned)} recipient(s), {runs} run(s); nothing is written"]
    header = (f"{'recipient':<16} {'destination':<16} {'windows':>7}  {'first .. last':<36} "
              f"{'bounds [lower, upper)':<53} {'HW':<27} est. rows")
    lines.append(header)
    for p in planned:
        span = f"{p.windows[0]} .. {p.windows[-1]}"
        bounds = f"[{p.lower:%Y-%m-%dT%H:%M:%S}, {p.upper:%Y-%m-%dT%H:%M:%S})"
        hw = "-" if p.high_watermark is None else p.high_watermark.strftime("%Y-%m-%dT%H:%M:%S.%f")
        rows = "?" if p.estimated_rows is None else f"{p.estimated_rows}"
        note = f"  full refresh: {p.full_refresh_reason}" if p.full_refresh_reason else ""
        lines.append(f"{p.recipient:<16} {p.destination:<16} {len(p.windows):>7}  {span:<36} "
                     f"{bounds + ' ' + p.bounds_reason:<53} {hw:<27} {rows}{note}")
    known = [p.estimated_rows for p in planned if p.estimated_rows is not None]
    unknown = len(planned) - len(known)
    if not known:
        total = "rows unknown (the source has no cheap count)"
    else:
        total = f"~{sum(known)} rows" + (f" (+ {unknown} recipient(s) the source cannot count cheaply)" if unknown else "")
    lines.append(f"total: {sum(len(p.windows) for p in planned)} window(s), {total}")
    return lines

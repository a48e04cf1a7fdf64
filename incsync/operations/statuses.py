"""Transfers as the user sees them: one Dagster run for one recipient, with a status derived from
the run, its steps and the run monitor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig
from incsync.config.products import product_filter
from incsync.config.tags import (
    ERROR_TAG,
    FULL_REFRESH_TAG,
    MODE_TAG,
    RECIPIENT_TAG,
    USER_TAG_PREFIX,
    reported_mode,
    validate_tag,
)
from incsync.core.blame import Blame, Party, parse_party
from incsync.core.bounds import UTC
from incsync.destinations.ownership import METADATA_KEY as DESTINATION_OWNER
from incsync.operations.blame import recipient_blame, run_blame
from incsync.operations.dagster_compat import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    RUN_FAILURE_REASON_TAG,
    WORKER_LOST_REASONS,
)
from incsync.operations.errors import StatusError
from incsync.operations.metadata import DELTA_ROWS_TRANSFERRED, ROWS_TRANSFERRED
from incsync.operations.partitions import RECIPIENT_DIM, RECIPIENTS_PARTITIONS, model_asset_key, model_partitions

EXPIRES_AFTER = timedelta(hours=6)
# What the run monitor says when a run's worker died (dagster/_daemon/monitoring/run_monitoring.py).
WORKER_LOST_MESSAGE = "Detected run worker status"


class TransferStatus(str, Enum):
    PENDING = "PENDING"  # queued or starting
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"  # failed, nothing committed
    PARTIAL_FAILURE = "PARTIAL_FAILURE"  # failed after some models/windows committed
    CANCELLED = "CANCELLED"  # cancelled before it started
    KILLED = "KILLED"  # cancelled while running
    EXPIRED = "EXPIRED"  # still pending after EXPIRES_AFTER
    ORPHANED = "ORPHANED"  # its worker was lost (run monitoring)


def parse_status(text: str) -> TransferStatus:
    try:
        return TransferStatus(text.upper())
    except ValueError:
        raise StatusError(
            f'unknown transfer status "{text}"; use one of {", ".join(s.value for s in TransferStatus)}'
        ) from None


@dataclass(frozen=True)
class Transfer:
    """One run of incsync models for one recipient (a backfill run may cover several)."""

    run_id: str
    status: TransferStatus
    models: tuple[str, ...]
    recipients: tuple[str, ...]
    created_at: datetime
    tags: dict[str, str] = field(default_factory=dict)
    partitions_committed: int = 0
    rows_transferred: int = 0
    delta_rows_transferred: int = 0
    owners: tuple[str, ...] = ()  # the owner stamps of the destinations it published to
    mode: str | None = None  # full_refresh, else incsync/mode: incremental, backfill, manual
    duration_seconds: float | None = None  # start to end (to now while running); None before it started
    error: str | None = None  # the first line of a failed run's error
    blamed: str | None = None  # a failed run's party: provider | recipient | unknown (core.blame)
    blame_reason: str | None = None  # its one-line reason, naming the fix
    started_at: datetime | None = None
    finished_at: datetime | None = None  # None while it runs (or never started)
    # Its materializations (one per committed window partition), for a per-recipient log (operations.audit).
    materializations: tuple[dg.AssetMaterialization, ...] = field(default=(), repr=False, compare=False)


def _failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE, ascending=False, limit=1).records
    event = records[0].event_log_entry.dagster_event if records else None
    return (event.message or "") if event else ""


def transfer_status(
    instance: dg.DagsterInstance, record: dg.RunRecord, *, committed: int, now: datetime | None = None
) -> TransferStatus:
    """Map a run to a transfer status; ``committed`` is the number of partitions it materialized."""
    run = record.dagster_run
    status = run.status
    now = now or datetime.now(UTC)
    if status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING):
        created = record.create_timestamp.astimezone(UTC)
        return TransferStatus.EXPIRED if now - created > EXPIRES_AFTER else TransferStatus.PENDING
    if status == dg.DagsterRunStatus.STARTED:
        return TransferStatus.RUNNING
    if status == dg.DagsterRunStatus.SUCCESS:
        return TransferStatus.SUCCESS
    if status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.CANCELING):
        return TransferStatus.CANCELLED if record.start_time is None else TransferStatus.KILLED
    reason = run.tags.get(RUN_FAILURE_REASON_TAG)
    if reason in WORKER_LOST_REASONS or (reason is None and _failure_message(instance, run.run_id).startswith(WORKER_LOST_MESSAGE)):
        return TransferStatus.ORPHANED
    return TransferStatus.PARTIAL_FAILURE if committed else TransferStatus.ERROR


def _models_of(run: dg.DagsterRun, models: dict[dg.AssetKey, ModelConfig]) -> list[ModelConfig]:
    return [models[k] for k in sorted(run.asset_selection or (), key=str) if k in models]


def _recipients_of(run: dg.DagsterRun, model: ModelConfig | None, registered: Sequence[str]) -> list[str]:
    tags = run.tags
    if RECIPIENT_TAG in tags:
        return [tags[RECIPIENT_TAG]]
    if f"dagster/partition/{RECIPIENT_DIM}" in tags:
        return [tags[f"dagster/partition/{RECIPIENT_DIM}"]]
    if model is None or ASSET_PARTITION_RANGE_START_TAG not in tags:
        return []
    parts = model_partitions(model)
    first, last = (
        parts.get_partition_key_from_str(tags[t]).keys_by_dimension[RECIPIENT_DIM]
        for t in (ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG)
    )
    if first == last or first not in registered or last not in registered:
        return sorted({first, last})
    i, j = registered.index(first), registered.index(last)
    return list(registered[min(i, j) : max(i, j) + 1])


def _sum_counts(materializations: Iterable[dg.AssetMaterialization | None]) -> tuple[int, int, int, tuple[str, ...]]:
    n = rows = delta = 0
    owners: set[str] = set()
    for mat in materializations:
        if mat is None:
            continue
        n += 1
        metadata = mat.metadata
        rows += int(metadata[ROWS_TRANSFERRED].value) if ROWS_TRANSFERRED in metadata else 0
        delta += int(metadata[DELTA_ROWS_TRANSFERRED].value) if DELTA_ROWS_TRANSFERRED in metadata else 0
        if DESTINATION_OWNER in metadata:
            owners.add(str(metadata[DESTINATION_OWNER].value))
    return n, rows, delta, tuple(sorted(owners))


_PAGE = 10_000


def _materializations_by_run(
    instance: dg.DagsterInstance, keys: Iterable[dg.AssetKey], *, since: float
) -> dict[str, list[dg.AssetMaterialization]]:
    """Every materialization of ``keys`` stored since ``since``, by run: one indexed query per page and
    asset, instead of one query per run (a SQLite instance keeps each run's events in its own file)."""
    by_run: dict[str, list[dg.AssetMaterialization]] = {}
    for key in keys:
        cursor = None
        while True:
            result = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, after_timestamp=since), limit=_PAGE, cursor=cursor, ascending=True,
            )
            for record in result.records:
                by_run.setdefault(record.run_id, []).append(record.asset_materialization)
            if not result.has_more:
                break
            cursor = result.cursor
    return by_run


def _error_line(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str | None:

    if ERROR_TAG in run.tags:
        return run.tags[ERROR_TAG]
    from incsync.operations.runs import failure_message  # a run failed outside the IO manager (or before this tag)

    text = failure_message(instance, run.run_id) or _failure_message(instance, run.run_id)
    return text.strip().splitlines()[0] if text and text.strip() else None


def _duration(record: dg.RunRecord, now: datetime) -> float | None:
    if record.start_time is None:
        return None
    end = record.end_time if record.end_time is not None else now.timestamp()
    return max(0.0, end - record.start_time)


def _at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _party(text: str) -> Party:
    try:
        return parse_party(text)
    except ValueError as exc:
        raise StatusError(str(exc)) from None


def _blame(instance: dg.DagsterInstance, run: dg.DagsterRun, recipients: list[str], recipient: str | None,
           *, orphaned: bool) -> Blame | None:
    """The run's blame; asked for one recipient of a run of several, that recipient's own (its failure metadata)."""
    if recipient is not None and len(recipients) > 1:
        return recipient_blame(instance, run, recipient, orphaned=orphaned)
    return run_blame(instance, run, orphaned=orphaned)


def list_transfers(
    instance: dg.DagsterInstance,
    config: IncsyncConfig,
    *,
    recipient: str | None = None,
    status: TransferStatus | str | None = None,
    tags: dict[str, str] | None = None,
    limit: int | None = 200,
    now: datetime | None = None,
    blamed: Party | str | None = None,
    product: str | None = None,
    updated_after: datetime | None = None,
) -> list[Transfer]:
    """The latest ``limit`` incsync runs, newest first, filtered by recipient, status, user tags, the
    blamed party of a failed run (``blamed``: only failed runs blamed on it), product (runs of the
    product's models for its subscribers) and ``updated_after`` (runs whose status changed since then)."""
    wanted_status = parse_status(status) if isinstance(status, str) else status
    wanted_party = _party(blamed) if isinstance(blamed, str) else blamed
    in_product = None if product is None else product_filter(config, product)
    run_tags = {USER_TAG_PREFIX + k: v for k, v in (validate_tag(k, v) for k, v in (tags or {}).items())}
    if recipient is not None:
        validate_tag("recipient", recipient)
    models = {model_asset_key(m): m for m in config.models}
    registered = list(instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS))
    now = now or datetime.now(UTC)
    records = [r for r in instance.get_run_records(dg.RunsFilter(tags=run_tags, updated_after=updated_after), limit=limit)
               if _models_of(r.dagster_run, models)]
    by_run = _materializations_by_run(
        instance, {k for r in records for k in (r.dagster_run.asset_selection or ()) if k in models},
        since=min((r.create_timestamp.timestamp() for r in records), default=0.0) - 1.0,
    ) if records else {}
    out: list[Transfer] = []
    for record in records:
        run = record.dagster_run
        run_models = _models_of(run, models)
        recipients = _recipients_of(run, run_models[0], registered)
        if recipient is not None and recipient not in recipients:
            continue
        if in_product is not None and not in_product([m.model_name for m in run_models], recipients):
            continue
        committed, rows, delta, owners = _sum_counts(by_run.get(run.run_id, []))
        state = transfer_status(instance, record, committed=committed, now=now)
        if wanted_status is not None and state != wanted_status:
            continue
        failed = state in (TransferStatus.ERROR, TransferStatus.PARTIAL_FAILURE, TransferStatus.ORPHANED)
        who = _blame(instance, run, recipients, recipient, orphaned=state == TransferStatus.ORPHANED) if failed else None
        if wanted_party is not None and (who is None or who.party != wanted_party):
            continue
        out.append(
            Transfer(
                run_id=run.run_id,
                status=state,
                models=tuple(m.model_name for m in run_models),
                recipients=tuple(recipients),
                created_at=record.create_timestamp.astimezone(UTC),
                tags={k.removeprefix(USER_TAG_PREFIX): v for k, v in run.tags.items() if k.startswith(USER_TAG_PREFIX)},
                partitions_committed=committed,
                rows_transferred=rows,
                delta_rows_transferred=delta,
                owners=owners,
                mode=reported_mode(run.tags.get(MODE_TAG), full_refresh=run.tags.get(FULL_REFRESH_TAG, "").lower() == "true"),
                duration_seconds=_duration(record, now),
                error=_error_line(instance, run) if failed else None,
                blamed=who.party.value if who else None,
                blame_reason=who.reason if who else None,
                started_at=_at(record.start_time),
                finished_at=_at(record.end_time),
                materializations=tuple(by_run.get(run.run_id, ())),
            )
        )
    return out


def counts_by_model(transfers: Iterable[Transfer]) -> dict[str, Counter[str]]:
    """Per model, how many transfers are in each status."""
    counts: dict[str, Counter[str]] = {}
    for t in transfers:
        for model in t.models:
            counts.setdefault(model, Counter())[t.status.value] += 1
    return counts

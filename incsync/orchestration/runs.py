"""Run transfers through the Dagster instance in this process, as the daemon would, and read back their metadata."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from incsync.orchestration.assets import model_asset_key
from incsync.orchestration.liveness import process_tag
from incsync.orchestration.launch import RunSpec, run_specs, register
from incsync.core.bounds import UTC
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.orchestration.metadata import DELTA_ROWS_TRANSFERRED, HIGH_WATERMARK, ROWS_TRANSFERRED, TRANSFER_TYPE
from incsync.orchestration.partitions import split_key
from incsync.config.tags import INCREMENTAL, PROCESS_TAG

MANUAL = "manual"


@dataclass(frozen=True)
class TransferLine:
    """One committed (or failed) transfer as the CLI prints it."""

    model: str
    recipient: str
    window: str
    rows_transferred: int | None
    delta_rows_transferred: int | None
    high_watermark: str | None
    transfer_type: str | None
    ok: bool = True

    def __str__(self) -> str:
        if not self.ok:
            return f"{self.model:<12} {self.recipient:<12} {self.window:<17} FAILED"
        return (
            f"{self.model:<12} {self.recipient:<12} {self.window:<17} rows_transferred={self.rows_transferred:<8} "
            f"delta_rows_transferred={self.delta_rows_transferred:<8} high_watermark={self.high_watermark} "
            f"{self.transfer_type}"
        )


@dataclass(frozen=True)
class RunResult:
    """One launched run: its lines (one per partition) and, when it failed, why (read from that run)."""

    run_id: str
    success: bool
    lines: list[TransferLine]
    error: str | None = None


def run_in_process(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    specs: Sequence[RunSpec],
    *,
    windows: dict[str, list[str]],
    progress: Callable[[TransferLine], None] | None = None,
    log_level: str = "CRITICAL",
) -> list[RunResult]:
    """Execute each run in this process (one Spark session for all), as the daemon would launch it.

    ``windows[recipient]`` lists the window keys each recipient's lines report (its part of the box).
    """
    results: list[RunResult] = []
    for spec in specs:
        job = defs.resolve_job_def(spec.model.model_name)  # one job per model (project.build_definitions)
        key = spec.single_partition
        kwargs: dict[str, object] = {"partition_key": key} if key is not None else {}
        tags = dict(spec.tags) if key is not None else {**spec.tags, **spec.range_tags}
        tags[PROCESS_TAG] = process_tag()  # this process runs it: `incsync transfers` can tell when it died
        result = job.execute_in_process(
            instance=instance, asset_selection=[model_asset_key(spec.model)], tags=tags, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}}, **kwargs,
        )
        done: dict[tuple[str, str], TransferLine] = {}
        # From the instance, not the result: a model's job materializes each commit as it lands, from
        # the transfer's threads, outside the events the step yields (``dagster_compat.report_materialized``).
        for record in _materializations(instance, result.run_id):
            mat = record.event_log_entry.asset_materialization
            if mat is None or mat.partition is None:
                continue
            md = {k: v.value for k, v in mat.metadata.items()}
            hw = md.get(HIGH_WATERMARK)
            cell = split_key(spec.model, mat.partition)
            done[(cell.recipient_id, cell.window_key)] = TransferLine(
                model=spec.model.model_name,
                recipient=cell.recipient_id,
                window=cell.window_key,
                rows_transferred=md.get(ROWS_TRANSFERRED),
                delta_rows_transferred=md.get(DELTA_ROWS_TRANSFERRED),
                high_watermark=None if hw is None else datetime.fromtimestamp(hw, UTC).isoformat(),
                transfer_type=md.get(TRANSFER_TYPE),
            )
        lines = []
        for rid in spec.recipients:
            for window in windows.get(rid, []):
                line = done.get((rid, window)) or TransferLine(spec.model.model_name, rid, window, None, None, None, None, ok=False)
                lines.append(line)
                if progress:
                    progress(line)
        error = None if result.success else failure_message(instance, result.run_id)
        results.append(RunResult(result.run_id, result.success, lines, error))
    return results


def _materializations(instance: dg.DagsterInstance, run_id: str, page: int = 1000) -> Iterator[dg.EventLogRecord]:
    """The run's materialization records, a page at a time: a backfill of 139,000 partitions never has
    all its records (each with its metadata) in memory at once."""
    cursor = None
    while True:
        found = instance.get_records_for_run(run_id, cursor=cursor, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=page)
        yield from found.records
        if not found.has_more:
            return
        cursor = found.cursor


def run_transfers(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    config: IncsyncConfig,
    model: ModelConfig,
    recipient: RecipientConfig,
    windows: Sequence[str],
    scheduled: bool = False,
    full_refresh: bool = False,
    tags: dict[str, str] | None = None,
    progress: Callable[[TransferLine], None] | None = None,
    log_level: str = "CRITICAL",
) -> list[TransferLine]:
    """Materialize ``windows`` (contiguous) of (model, recipient) in one run: one read, one Spark session."""
    ordered = sorted(windows)
    registered = register(instance, [recipient.id])
    specs = run_specs(
        config, model, [recipient], windows={recipient.id: (ordered[0], ordered[-1])}, registered=registered,
        mode=INCREMENTAL if scheduled else MANUAL, full_refresh=full_refresh, user_tags=tags,
    )
    results = run_in_process(defs, instance, specs, windows={recipient.id: ordered}, progress=progress, log_level=log_level)
    return [line for r in results for line in r.lines]


def failure_message(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """The error of the run's failed step, for the CLI's last line."""
    for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        if event.dagster_event and event.dagster_event.is_step_failure:
            data = event.dagster_event.step_failure_data
            if data and data.error:
                return _user_message(data.error)
    return None


def _user_message(error) -> str:  # noqa: ANN001 - dagster's SerializableErrorInfo
    """The first incsync error in the cause chain, else the innermost cause."""
    from incsync import errors

    ours = {name for name, obj in vars(errors).items() if isinstance(obj, type) and issubclass(obj, Exception)}
    chain, node = [], error
    while node is not None:
        chain.append(node)
        node = node.cause
    for node in chain:
        if node.cls_name in ours:
            return f"{node.cls_name}: {node.message.strip().removeprefix(f'incsync.errors.{node.cls_name}: ')}"
    return chain[-1].message.strip()

"""Run transfers through the Dagster instance in this process, as the daemon would, and read back their metadata."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.tags import INCREMENTAL, PROCESS_TAG
from incsync.core.bounds import UTC
from incsync.operations.launch import RunSpec, register, run_specs
from incsync.operations.liveness import process_tag
from incsync.operations.partitions import model_asset_key
from incsync.transfer.progress import Committed, listening

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
        run_id = str(uuid.uuid4())  # Dagster's own form; known before the run starts, so its commits are told apart
        done: dict[tuple[str, str], TransferLine] = {}
        # From the commits as they land in this process (``transfer.progress``), with the counts their
        # materializations carry: reading a run's materializations back from the event log cost a
        # deserialized record per partition (a backfill's every window of every recipient).
        with listening(lambda c, done=done, run_id=run_id: _collect(done, c) if c.run_id == run_id else None):
            result = job.execute_in_process(
                instance=instance, asset_selection=[model_asset_key(spec.model)], tags=tags, raise_on_error=False,
                run_config={"loggers": {"console": {"config": {"log_level": log_level}}}}, run_id=run_id, **kwargs,
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


def _collect(done: dict[tuple[str, str], TransferLine], c: Committed) -> None:
    hw = None if c.high_watermark is None else datetime.fromtimestamp(c.high_watermark.timestamp(), UTC).isoformat()
    done[(c.recipient, c.window)] = TransferLine(c.model, c.recipient, c.window, c.rows, c.delta_rows, hw, c.transfer_type)


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


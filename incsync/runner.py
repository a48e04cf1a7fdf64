"""Launch transfers through the Dagster instance, as the UI would, and read back their metadata."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from incsync.assets import FULL_REFRESH_TAG, model_asset_key
from incsync.automation.tags import INCREMENTAL, transfer_run_tags
from incsync.changes import UTC
from incsync.config import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.metadata import DELTA_ROWS_TRANSFERRED, HIGH_WATERMARK, ROWS_TRANSFERRED, TRANSFER_TYPE
from incsync.paths import dagster_home
from incsync.partitions import RECIPIENTS_PARTITIONS, partition_key, split_key, window_partitions
from incsync.transfer import recipient_start

MANUAL = "manual"


def dagster_instance(config_file: Path) -> dg.DagsterInstance:
    """The instance in $DAGSTER_HOME, else ``.dagster`` beside the config file (created on first use)."""
    home = dagster_home(config_file)
    os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return dg.DagsterInstance.get()


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


def recipient_windows(model: ModelConfig, recipient: RecipientConfig, *, until: datetime | None = None) -> list[str]:
    """Window keys from the recipient's first window to the one holding ``until`` (default: now)."""
    windows = window_partitions(model)
    start = recipient_start(model, recipient)
    with dg.partition_loading_context(effective_dt=until):
        keys = windows.get_partition_keys()
    return [k for k in keys if windows.time_window_for_partition_key(k).end.astimezone(UTC) > start]


def scheduled_windows(model: ModelConfig, *, now: datetime | None = None, previous_tick: datetime | None = None) -> list[str]:
    """What a schedule tick runs: the open window, plus the window that closed since the previous tick.

    Unlike the schedule (automation/windows.tick_span), a command-line run has no previous tick of its
    own; without one it includes the previous window, so a run launched off-tick just after a window
    closed still gives that window its final pass. That costs one extra (usually no-change) transfer.
    """
    windows = window_partitions(model)
    with dg.partition_loading_context(effective_dt=now):
        keys = windows.get_partition_keys()
    if not keys:
        return []
    current = keys[-1]
    current_start = windows.time_window_for_partition_key(current).start.astimezone(UTC)
    if len(keys) > 1 and (previous_tick is None or previous_tick < current_start):
        return [keys[-2], current]
    return [current]


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
    batch_size: int = 31,
    progress: Callable[[TransferLine], None] | None = None,
    log_level: str = "CRITICAL",
) -> list[TransferLine]:
    """Materialize ``windows`` of (model, recipient); consecutive windows share one run (one Spark session)."""
    if not instance.has_dynamic_partition(RECIPIENTS_PARTITIONS, recipient.id):
        instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, [recipient.id])
    job = defs.resolve_implicit_global_asset_job_def()
    asset_key = model_asset_key(model)
    run_tags = {
        **transfer_run_tags(config, model, recipient, mode=INCREMENTAL if scheduled else MANUAL),
        **({FULL_REFRESH_TAG: "true"} if full_refresh else {}),
        **(tags or {}),
    }
    ordered = sorted(windows)
    lines: list[TransferLine] = []
    for i in range(0, len(ordered), batch_size):
        chunk = ordered[i : i + batch_size]
        first, last = partition_key(chunk[0], recipient.id), partition_key(chunk[-1], recipient.id)
        chunk_tags = dict(run_tags)
        kwargs: dict[str, object] = {}
        if len(chunk) == 1:
            kwargs["partition_key"] = first
        else:
            chunk_tags[ASSET_PARTITION_RANGE_START_TAG] = str(first)
            chunk_tags[ASSET_PARTITION_RANGE_END_TAG] = str(last)
        result = job.execute_in_process(
            instance=instance, asset_selection=[asset_key], tags=chunk_tags, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}}, **kwargs,
        )
        done = {}
        for event in result.get_asset_materialization_events():
            mat = event.materialization
            if mat is None or mat.partition is None:
                continue
            md = {k: v.value for k, v in mat.metadata.items()}
            hw = md.get(HIGH_WATERMARK)
            cell = split_key(model, mat.partition)
            done[cell.window_key] = TransferLine(
                model=model.model_name,
                recipient=recipient.id,
                window=cell.window_key,
                rows_transferred=md.get(ROWS_TRANSFERRED),
                delta_rows_transferred=md.get(DELTA_ROWS_TRANSFERRED),
                high_watermark=None if hw is None else datetime.fromtimestamp(hw, UTC).isoformat(),
                transfer_type=md.get(TRANSFER_TYPE),
            )
        for window in chunk:
            line = done.get(window) or TransferLine(model.model_name, recipient.id, window, None, None, None, None, ok=False)
            lines.append(line)
            if progress:
                progress(line)
        if not result.success:
            break
    return lines


def failure_message(instance: dg.DagsterInstance) -> str | None:
    """The error of the newest failed step, for the CLI's last line."""
    records = instance.get_run_records(limit=1)
    if not records:
        return None
    run_id = records[0].dagster_run.run_id
    for event in instance.all_logs(run_id):
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

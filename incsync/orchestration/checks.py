"""One non-blocking Dagster asset check per model, ``integrity``, partitioned like the model (window ×
recipient): verify the run's recipients (every one receiving the model when the run names none) and record
each recipient's result, Prequel's counters as its metadata, on that recipient's partitions, so the asset's
check view shows a failing recipient on its own row (docs/architecture.md#integrity-per-partition).

Which partitions: in a transfer run, the run's own (window, recipient) partitions; in a run of the check
alone (its schedule, a launch by hand), each recipient's first window, standing for its whole copy.

``integrity_check`` on the model says when it runs besides a launch by hand: ``after_transfer`` (in
every transfer run, for that run's recipients) or ``schedule`` (a check-only job at
``integrity_check_cron``). Dagster plans the check into every run that materializes the asset; with
``manual`` and ``schedule`` it yields no result there (the UI shows it skipped) and costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._utils.warnings import disable_dagster_warnings

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.core.bounds import from_epoch, recipient_start
from incsync.core.windows import window_key_for
from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from incsync.operations.partitions import model_asset_key, model_partitions, partition_key

CHECK_NAME = "integrity"


def check_key(model: ModelConfig) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(model_asset_key(model), CHECK_NAME)


def _run_windows(context: dg.AssetCheckExecutionContext, model: ModelConfig) -> dict[str, tuple[str, ...]] | None:
    """The run's windows by recipient id, from its partition or partition range; None: the run names none."""
    from incsync.orchestration.assets import grid_between

    tags = context.run.tags
    first = tags.get("dagster/partition") or tags.get(ASSET_PARTITION_RANGE_START_TAG)
    last = tags.get("dagster/partition") or tags.get(ASSET_PARTITION_RANGE_END_TAG)
    if not first or not last:
        return None
    grid = grid_between(context.instance, model, first, last)
    return dict.fromkeys(grid.recipients, grid.windows)


def build_integrity_check(model: ModelConfig) -> dg.AssetChecksDefinition:
    # Partitioned checks are a preview in Dagster 1.13 (a PreviewWarning at every load of the code location);
    # docs/architecture.md#integrity-per-partition says what incsync relies on and how it is tested.
    with disable_dagster_warnings():
        spec = dg.AssetCheckSpec(
            CHECK_NAME, asset=model_asset_key(model), blocking=False, partitions_def=model_partitions(model),
            description=f"Verify {model.model_name}: each recipient's copy against its source rows up to its high "
            "watermark, by hashed key buckets (missing, stale, incorrect and orphaned rows must be 0); each "
            "recipient's result is recorded on its partitions.",
        )

    @dg.multi_asset_check(specs=[spec], can_subset=True, required_resource_keys={"spark", "incsync"},
                          name=f"{model.model_name}_integrity")
    def _integrity(context):  # noqa: ANN001, ANN202 - Dagster reads the annotation; yields one result a partition
        transfer_run = model_asset_key(model) in (context.run.asset_selection or set())
        if transfer_run and model.integrity_check != "after_transfer":
            return
        yield from _evaluate(context, model)

    return _integrity


def _evaluate(context: dg.AssetCheckExecutionContext, model: ModelConfig) -> Iterator[dg.AssetCheckEvaluation]:
    """Per recipient: verify (and repair when the model says so), then one evaluation per partition of it."""
    from incsync.config.products import receives, subscribers
    from incsync.integrity.verify import verify_recipient
    from incsync.staging.folders import default_staging_dir

    config = context.resources.incsync.config
    windows = _run_windows(context, model)
    if windows is None:  # the check alone: every recipient receiving the model
        recipients = subscribers(config, model.model_name)
    else:  # a transfer's run: those of its recipients that are enabled and receive the model
        enabled = {r.id: r for r in config.recipients if r.enabled}
        recipients = [r for i in windows if (r := enabled.get(i)) is not None and receives(config, r, model.model_name)]
    failing: list[str] = []
    for recipient in recipients:
        metadata: dict[str, object] = {"recipient": recipient.id, "sampling_rate": model.integrity_sampling_rate,
                                       "deletes": model.deletes}
        try:
            result = verify_recipient(
                config, model, recipient, spark=lambda: context.resources.spark.spark_session,
                sampling_rate=model.integrity_sampling_rate, staging_root=Path(default_staging_dir(config)),
            )
        except Exception as exc:  # noqa: BLE001 - a non-blocking check reports, never fails the transfer run
            passed, lines = False, [f"{recipient.id}: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}"]
            metadata["error"] = lines[0]
        else:
            passed, lines = result.passed, [result.line()]
            metadata.update(result.counts)
            if not passed and model.integrity_repair:
                lines.append(_repair(context, config, model, recipient))
        metadata["details"] = dg.MetadataValue.md("\n".join(f"- `{line}`" for line in lines))
        if not passed:
            failing.append(recipient.id)
        keys = windows[recipient.id] if windows is not None else (_first_window(model, recipient),)
        partitions = [str(partition_key(window, recipient.id)) for window in keys]
        targets = _latest_materializations(context.instance, model_asset_key(model), partitions)
        for partition in partitions:
            yield dg.AssetCheckEvaluation(
                asset_key=model_asset_key(model), check_name=CHECK_NAME, passed=passed, metadata=metadata,
                severity=dg.AssetCheckSeverity.WARN, partition=partition, target_materialization_data=targets.get(partition),
            )
    context.log.info(f"integrity of {model.model_name}: {len(recipients)} recipient(s) checked, "
                     f"failing: {', '.join(failing) or 'none'}")


def _first_window(model: ModelConfig, recipient: RecipientConfig) -> str:
    """The recipient's first window: where a run of the check alone records its result, standing for the whole
    copy it verified. Transfers rewrite the open window every tick, which would clear the result within a
    tick (Dagster shows a partition's result only until the partition materializes again); the first window
    is rewritten only by a backfill or a full refresh, after which the copy wants checking again anyway."""
    return window_key_for(model, max(recipient_start(model, recipient), from_epoch(model.min_start_time_epoch)))


def _latest_materializations(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partitions: list[str],
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """Each partition's latest materialization, which its evaluation names: Dagster shows a partition's check
    result only while it targets that partition's latest materialization (``AssetCheckPartitionInfo.is_current``),
    and a new transfer of the partition clears it. Two queries for the lot, where ``AssetCheckResult`` makes one a
    partition."""
    from dagster._core.events import DagsterEventType

    ids = instance.event_log_storage.get_latest_storage_id_by_partition(
        asset_key, DagsterEventType.ASSET_MATERIALIZATION, partitions=set(partitions))
    if not ids:
        return {}
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset_key, storage_ids=list(ids.values())),
                                              limit=len(ids)).records
    return {r.partition_key: AssetCheckEvaluationTargetMaterializationData(
        storage_id=r.storage_id, run_id=r.run_id, timestamp=r.timestamp) for r in records if r.partition_key}


def _repair(context: dg.AssetCheckExecutionContext, config: IncsyncConfig, model: ModelConfig, recipient: RecipientConfig) -> str:
    from incsync.staging.folders import default_staging_dir
    from incsync.transfer.repair import repair_recipient

    try:
        done = repair_recipient(config, model, recipient, spark=lambda: context.resources.spark.spark_session,
                                staging_root=Path(default_staging_dir(config)))
    except Exception as exc:  # noqa: BLE001 - reported in the check's metadata; the copy stays as found
        return f"repair of {recipient.id} failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return f"repaired: {done.line()}"


def build_check_schedule(model: ModelConfig, *, default_status: dg.DefaultScheduleStatus) -> dg.ScheduleDefinition:
    job = dg.define_asset_job(f"{model.model_name}_integrity_check", selection=dg.AssetSelection.checks(check_key(model)))
    return dg.ScheduleDefinition(name=f"{model.model_name}_integrity_schedule", job=job,
                                 cron_schedule=model.integrity_check_cron, default_status=default_status)

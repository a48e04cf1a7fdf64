"""One non-blocking Dagster asset check per model, ``integrity``: verify for the run's recipients (every
enabled one when the run names none), Prequel's counters summed as its metadata.

``integrity_check`` on the model says when it runs besides a launch by hand: ``after_transfer`` (in
every transfer run, for that run's recipients) or ``schedule`` (a check-only job at
``integrity_check_cron``). Dagster plans the check into every run that materializes the asset; with
``manual`` and ``schedule`` it yields no result there (the UI shows it skipped) and costs nothing.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from incsync.operations.partitions import model_asset_key, split_key

CHECK_NAME = "integrity"


def check_key(model: ModelConfig) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(model_asset_key(model), CHECK_NAME)


def _run_recipients(context: dg.AssetCheckExecutionContext, config: IncsyncConfig, model: ModelConfig) -> list:
    tags = context.run.tags
    ids: list[str] = []
    if "dagster/partition" in tags:
        ids = [split_key(model, tags["dagster/partition"]).recipient_id]
    else:
        start, end = tags.get(ASSET_PARTITION_RANGE_START_TAG), tags.get(ASSET_PARTITION_RANGE_END_TAG)
        if start and end:
            first, last = split_key(model, start).recipient_id, split_key(model, end).recipient_id
            enabled = [r.id for r in config.recipients if r.enabled]
            if first in enabled and last in enabled:
                ids = enabled[enabled.index(first) : enabled.index(last) + 1]
    from incsync.config.products import receives, subscribers

    if ids:  # a transfer's run: those of its recipients that receive the model
        return [r for r in (config.recipient(i) for i in ids) if receives(config, r, model.model_name)]
    return subscribers(config, model.model_name)


def build_integrity_check(model: ModelConfig) -> dg.AssetChecksDefinition:
    spec = dg.AssetCheckSpec(
        CHECK_NAME, asset=model_asset_key(model), blocking=False,
        description=f"Verify {model.model_name}: each recipient's copy against its source rows up to its high "
        "watermark, by hashed key buckets (missing, stale, incorrect and orphaned rows must be 0).",
    )

    @dg.multi_asset_check(specs=[spec], can_subset=True, required_resource_keys={"spark", "incsync"},
                          name=f"{model.model_name}_integrity")
    def _integrity(context):  # noqa: ANN001, ANN202 - Dagster reads the annotation; yields one result or none
        transfer_run = model_asset_key(model) in (context.run.asset_selection or set())
        if transfer_run and model.integrity_check != "after_transfer":
            return
        yield _evaluate(context, model)

    return _integrity


def _evaluate(context: dg.AssetCheckExecutionContext, model: ModelConfig) -> dg.AssetCheckResult:
    from incsync.integrity.verify import COUNTERS, verify_recipient
    from incsync.staging.folders import default_staging_dir

    config = context.resources.incsync.config
    totals = dict.fromkeys(COUNTERS, 0)
    lines, failing, errors = [], [], []
    for recipient in _run_recipients(context, config, model):
        try:
            result = verify_recipient(
                config, model, recipient, spark=lambda: context.resources.spark.spark_session,
                sampling_rate=model.integrity_sampling_rate, staging_root=Path(default_staging_dir(config)),
            )
        except Exception as exc:  # noqa: BLE001 - a non-blocking check reports, never fails the transfer run
            errors.append(f"{recipient.id}: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}")
            continue
        for counter in COUNTERS:
            totals[counter] += result.counts[counter]
        lines.append(result.line())
        if not result.passed:
            failing.append(recipient.id)
            if model.integrity_repair:
                lines.append(_repair(context, config, model, recipient))
    metadata: dict[str, object] = {"sampling_rate": model.integrity_sampling_rate, "deletes": model.deletes, **totals,
                                   "recipients_checked": len(lines), "failing_recipients": ", ".join(failing) or "none",
                                   "details": dg.MetadataValue.md("\n".join(f"- `{line}`" for line in lines) or "-")}
    if errors:
        metadata["errors"] = "; ".join(errors)
    return dg.AssetCheckResult(asset_key=check_key(model).asset_key, check_name=CHECK_NAME, passed=not failing and not errors,
                               metadata=metadata, severity=dg.AssetCheckSeverity.WARN)


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

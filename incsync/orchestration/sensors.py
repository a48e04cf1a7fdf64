"""The recipient sensor: keeps the "recipients" dynamic partitions equal to the enabled recipients
of the registry and launches each new recipient's initial backfill of the models it receives.

Products: the partitions stay one set shared by every model; a model's runs simply never name a recipient
that does not receive it. Changes of a recipient's products or tier are told from the sensor's cursor
(``subscriptions``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.products import product_models, receives
from incsync.config.rows import refused_lines
from incsync.config.tags import BACKFILL
from incsync.core.bounds import UTC
from incsync.core.windows import initial_backfill_span, window_key_for
from incsync.operations.launch import run_specs
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, recipients_partitions
from incsync.orchestration.assets import model_job
from incsync.orchestration.resources import cached_config
from incsync.orchestration.subscriptions import (
    Registry,
    catch_up_requests,
    grouping,
    log_unsubscribed,
    subscription_changes,
    tier_moves,
)

RECIPIENT_SENSOR = "incsync_recipients"


def _now() -> datetime:
    return datetime.now(UTC)


def initial_backfill_requests(
    config: IncsyncConfig,
    models: Sequence[ModelConfig],
    recipients: Sequence[RecipientConfig],
    now: datetime,
    *,
    registered: Sequence[str],
    run_key_prefix: str = "initial",
) -> list[dg.RunRequest]:
    """Per model, runs covering each new recipient's windows from its start to the open window, many
    recipients to a run (see ``launch``): one read per run, one Spark session."""
    requests = []
    held = product_models(config)
    for model in models:
        windows = {}
        for recipient in recipients:
            if not receives(config, recipient, model.model_name, held=held):
                continue
            span = initial_backfill_span(model, recipient, now)
            if span is not None:
                windows[recipient.id] = (window_key_for(model, span[0]), window_key_for(model, span[1]))
        specs = run_specs(
            config, model, recipients, windows=windows, registered=registered, mode=BACKFILL,
            run_key_prefix=f"{run_key_prefix}:{now.isoformat()}",
        )
        requests += [spec.run_request() for spec in specs]
    return requests


def build_recipient_sensor(
    config_path: str,
    models: Sequence[ModelConfig],
    *,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    clock: Callable[[], datetime] = _now,
    jobs: Sequence[dg.UnresolvedAssetJobDefinition] | None = None,
) -> dg.SensorDefinition:
    """Reads the registry on every tick (the file is re-read when it changed) and asks the instance
    only for what is missing, so a tick stays cheap with thousands of recipients.

    ``jobs`` are the models' jobs (``assets.model_job``) the Definitions hold; each run request names
    its model's, so the runs are listed under the model's name, not an anonymous asset job."""
    models = list(models)
    jobs = list(jobs) if jobs is not None else [model_job(m) for m in models]

    @dg.sensor(
        name=RECIPIENT_SENSOR,
        minimum_interval_seconds=30,
        default_status=default_status,
        jobs=jobs,
        description="Adds and removes recipient partitions as the registry changes; launches each new "
        "recipient's initial backfill from its start, of the models its products hold (and of a model a "
        "recipient starts receiving).",
    )
    def recipients_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        config = cached_config(config_path)
        for line in refused_lines(config, most=20):  # each refused table row disables only its own recipients
            context.log.warning(line)
        enabled = [r for r in config.recipients if r.enabled]
        order = context.instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
        registered = set(order)
        # Recipients of one tier and set of products registered side by side: a schedule's runs hold
        # recipients contiguous in registration order, so grouping keeps them recipients_per_run wide.
        added = sorted((r for r in enabled if r.id not in registered), key=lambda r: grouping(config, r))
        removed = sorted(registered - {r.id for r in enabled})
        kept = registered - set(removed)
        before, current = Registry.load(context.instance, context.cursor), Registry.now(config, models, enabled)
        subscribed, unsubscribed = subscription_changes(before, current, kept)
        moved = tier_moves(before, current, kept)
        log_unsubscribed(context, config, unsubscribed)
        cursor = current.save(context.instance, context.cursor)
        if not added and not removed and not subscribed and not moved:
            if cursor != context.cursor:
                context.update_cursor(cursor)
            return dg.SkipReason(f"{len(registered)} recipients registered, none added or removed")
        now = clock()
        by_id = {r.id: r for r in enabled}
        changed = [
            request
            for model in models if subscribed.get(model.model_name)
            for request in initial_backfill_requests(
                config, [model], [by_id[rid] for rid in order if rid in subscribed[model.model_name]], now,
                registered=order, run_key_prefix="subscribed",
            )
        ] + catch_up_requests(config, models, moved, now, registered=order)
        partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
        if added:
            partition_requests.append(recipients_partitions.build_add_request([r.id for r in added]))
        if removed:
            partition_requests.append(recipients_partitions.build_delete_request(removed))
        if added or removed:
            context.log.info(
                "%s recipients added (%s), %s removed (%s)",
                len(added), ", ".join(r.id for r in added[:10]), len(removed), ", ".join(removed[:10]),
            )
        for model, ids in sorted(subscribed.items()):
            context.log.info("model %s: %s recipient(s) now receive it, initial backfill launched (%s)",
                             model, len(ids), ", ".join(sorted(ids)[:10]))
        if moved:
            context.log.info("%s recipient(s) changed tier, catch-up runs launched (%s)", len(moved), ", ".join(sorted(moved)[:10]))
        return dg.SensorResult(
            # The add request appends the new recipients in this order, so the runs' recipient ranges hold.
            run_requests=initial_backfill_requests(
                config, models, added, now, registered=[r for r in order if r not in removed] + [r.id for r in added]
            ) + changed,
            dynamic_partitions_requests=partition_requests,
            cursor=cursor,
        )

    return recipients_sensor


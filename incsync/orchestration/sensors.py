"""The recipient sensor: keeps the "recipients" dynamic partitions equal to the enabled recipients
of the registry and launches each new recipient's initial backfill of the models it receives.

Products: the partitions stay one set shared by every model; a model's runs simply never name a recipient
that does not receive it. The sensor's cursor holds, per model, the registered recipients that do not
receive it, so a recipient added to a product gets that model's initial backfill on the next tick, and
one removed from it is logged with how to drop the copy it keeps."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime

import dagster as dg

from incsync.config.tags import BACKFILL
from incsync.core.windows import initial_backfill_span
from incsync.core.bounds import UTC
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.products import kept_copy, product_models, receives, tier_of
from incsync.orchestration.assets import model_job
from incsync.orchestration.launch import run_specs
from incsync.core.windows import window_key_for
from incsync.orchestration.partitions import RECIPIENTS_PARTITIONS, recipients_partitions
from incsync.orchestration.resources import cached_config

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
        enabled = [r for r in config.recipients if r.enabled]
        order = context.instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
        registered = set(order)
        # Recipients of one tier and set of products registered side by side: a schedule's runs hold
        # recipients contiguous in registration order, so grouping keeps them recipients_per_run wide.
        added = sorted((r for r in enabled if r.id not in registered), key=lambda r: _grouping(config, r))
        removed = sorted(registered - {r.id for r in enabled})
        before = _unsubscribed(context.cursor)
        now_unsubscribed = _unsubscribed_now(config, models, enabled)
        subscribed, unsubscribed = _changes(before, now_unsubscribed, registered - set(removed))
        cursor = json.dumps({"unsubscribed": {m: sorted(ids) for m, ids in now_unsubscribed.items() if ids}}, sort_keys=True)
        if not added and not removed and not subscribed:
            _log_unsubscribed(context, config, unsubscribed)
            if cursor != context.cursor:
                context.update_cursor(cursor)
            return dg.SkipReason(f"{len(registered)} recipients registered, none added or removed")
        now = clock()
        _log_unsubscribed(context, config, unsubscribed)
        by_id = {r.id: r for r in enabled}
        resubscribed = [
            request
            for model in models if subscribed.get(model.model_name)
            for request in initial_backfill_requests(
                config, [model], [by_id[rid] for rid in order if rid in subscribed[model.model_name]], now,
                registered=order, run_key_prefix=f"subscribed:{now.isoformat()}",
            )
        ]
        partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
        if added:
            partition_requests.append(recipients_partitions.build_add_request([r.id for r in added]))
        if removed:
            partition_requests.append(recipients_partitions.build_delete_request(removed))
        context.log.info(
            "%s recipients added (%s), %s removed (%s)",
            len(added), ", ".join(r.id for r in added[:10]), len(removed), ", ".join(removed[:10]),
        )
        for model, ids in sorted(subscribed.items()):
            context.log.info("model %s: %s recipient(s) now receive it, initial backfill launched (%s)",
                             model, len(ids), ", ".join(sorted(ids)[:10]))
        return dg.SensorResult(
            # The add request appends the new recipients in this order, so the runs' recipient ranges hold.
            run_requests=initial_backfill_requests(
                config, models, added, now, registered=[r for r in order if r not in removed] + [r.id for r in added]
            ) + resubscribed,
            dynamic_partitions_requests=partition_requests,
            cursor=cursor,
        )

    return recipients_sensor


def _grouping(config: IncsyncConfig, recipient: RecipientConfig) -> tuple[str, tuple[str, ...]]:
    """Tier, then products: recipients scheduled together sort together (a stable sort keeps the file's order)."""
    tier = tier_of(config, recipient)
    return (tier.name if tier is not None else "", tuple(sorted(recipient.products or ())))


def _unsubscribed(cursor: str | None) -> dict[str, set[str]]:
    """Per model, the recipients that did not receive it at the previous tick (from the cursor)."""
    if not cursor:
        return {}
    return {m: set(ids) for m, ids in json.loads(cursor).get("unsubscribed", {}).items()}


def _unsubscribed_now(
    config: IncsyncConfig, models: Sequence[ModelConfig], enabled: Sequence[RecipientConfig]
) -> dict[str, set[str]]:
    if not config.products:
        return {}
    held = product_models(config)
    return {m.model_name: {r.id for r in enabled if not receives(config, r, m.model_name, held=held)} for m in models}


def _changes(
    before: dict[str, set[str]], now: dict[str, set[str]], registered: set[str]
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per model, the registered recipients that started receiving it, and those that stopped."""
    models = set(before) | set(now)
    started = {m: (before.get(m, set()) - now.get(m, set())) & registered for m in models}
    stopped = {m: (now.get(m, set()) - before.get(m, set())) & registered for m in models}
    return {m: ids for m, ids in started.items() if ids}, {m: ids for m, ids in stopped.items() if ids}


def _log_unsubscribed(context: dg.SensorEvaluationContext, config: IncsyncConfig, stopped: dict[str, set[str]]) -> None:
    for model, ids in sorted(stopped.items()):
        for rid in sorted(ids)[:20]:
            context.log.warning(kept_copy(config, config.recipient(rid), model))
        if len(ids) > 20:
            context.log.warning("... and %s more recipients no longer receive model %s", len(ids) - 20, model)

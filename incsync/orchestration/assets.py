"""One asset per model, partitioned by window × recipient, downstream of its source table."""

from collections.abc import Iterable
from dataclasses import dataclass

import dagster as dg
from pydantic import Field

from incsync.config.model import IncsyncConfig, ModelConfig
from incsync.config.products import model_schedules, not_received, product_models, products_with, receives
from incsync.config.tags import ALLOW_MASS_DELETE_TAG, FULL_REFRESH_TAG, MODE_TAG
from incsync.core.blame import blame
from incsync.core.fingerprint import model_fingerprint
from incsync.core.windows import WindowPartition, window_of
from incsync.errors import NotSubscribedError
from incsync.operations.blame import tag_blame
from incsync.operations.dagster_compat import DEFER_ASSET_EVENTS_TAG, defers_asset_events, install_range_subsets, report_planned
from incsync.operations.liveness import mark_running
from incsync.operations.partitions import (
    RECIPIENTS_PARTITIONS,
    model_asset_key,
    model_partitions,
    partition_key,
    split_dims,
    window_partitions,
)
from incsync.orchestration.freshness import freshness_description, freshness_policy
from incsync.orchestration.resources import destination_resource_key, recipient_destination, source_resource_key
from incsync.spark.session import SparkWarmUp
from incsync.transfer.request import TransferPlan, TransferRequest, TransferRun

IO_MANAGER_KEY = "incsync_io_manager"
# UI backfills batch up to this many (window, recipient) partitions into one run: the run reads each
# recipient's contiguous windows once and its recipients with one query, and records every partition
# with its own metadata (see execute.py). 10,000 recipients x one window: 10 runs.
MAX_PARTITIONS_PER_RUN = 1024


class TransferRunConfig(dg.Config):
    """Run configuration of a model's transfers."""

    full_refresh: bool = Field(default=False, description="Reload the recipient's model from its start.")


def source_asset_key(model: ModelConfig) -> dg.AssetKey:
    """``<source>/tables/<source>.<table>``: the lineage graph labels a node by its key's last part, so the
    source table reads ``app_db.public.orders`` beside the model ``orders``, never the same name twice."""
    if model.source_table:
        return dg.AssetKey([model.source, "tables", f"{model.source}.{model.source_table}"])
    return dg.AssetKey([model.source, "queries", f"{model.source}.{model.model_name}_query"])


def model_job(model: ModelConfig):  # noqa: ANN201 - an unresolved asset job
    """The model's job, named after the model: the UI lists runs under ``orders``, not ``__ASSET_JOB``."""
    return dg.define_asset_job(
        name=model.model_name, selection=[model_asset_key(model)], partitions_def=model_partitions(model),
        description=f"Transfers of model {model.model_name} to its recipients.",
        # incsync reports the run's asset events itself: planned when the step starts, landed commits once a second.
        run_tags={DEFER_ASSET_EVENTS_TAG: "true"},
    )


def model_description(config: IncsyncConfig, model: ModelConfig) -> str:
    what = f"table `{model.source_table}`" if model.source_table else "a source query"
    tenants = (f"split by tenant column `{model.organization_column}`" if model.organization_column
               else "one source schema per recipient")
    window = model.max_transfer_time_window_seconds
    grid = "daily" if window == 86_400 else (f"{window // 3600}-hour" if window % 3600 == 0 else f"{window // 60}-minute")
    return (
        f"Each recipient's copy of {what} from source `{model.source}`, {tenants}. "
        f"Primary key: {', '.join(model.primary_key)}; changes tracked by `{model.last_modified_column}` "
        f"(lookback {config.lookback_seconds(model)} s); {grid} windows; schedule `{model.frequency}` (UTC)."
        + "".join(f" Tier {t}: `{cron}`." for t, cron in model_schedules(config, model)[1:])
        + (f" Products: {', '.join(products_with(config, model.model_name)) or 'none'} (recipients of other "
           "products do not receive it)." if config.products else "")
        + f" {freshness_description(config, model)}"
    )


def source_specs(config: IncsyncConfig) -> list[dg.AssetSpec]:
    """External assets for the source tables, so lineage shows source table → model."""
    specs: dict[dg.AssetKey, dg.AssetSpec] = {}
    for model in config.models:
        key = source_asset_key(model)
        vendor = config.source(model.source).vendor
        description = (
            f"Table `{model.source_table}` of source `{model.source}` ({vendor}), read by model {model.model_name}."
            if model.source_table else f"Source query of model {model.model_name} on source `{model.source}` ({vendor}):\n\n"
            f"```sql\n{model.source_query}\n```"
        )
        specs[key] = dg.AssetSpec(key=key, group_name=model.source, description=description, kinds={vendor},
                                  metadata={"source": model.source, "vendor": vendor})
    return list(specs.values())


def build_model_asset(config: IncsyncConfig, model: ModelConfig) -> dg.AssetsDefinition:
    destination_keys = {destination_resource_key(d.kind) for d in config.destinations}
    lookback = config.lookback_seconds(model)
    code_version = model_fingerprint(model)

    @dg.asset(
        key=model_asset_key(model),
        group_name=model.source,
        partitions_def=model_partitions(model),
        code_version=code_version,
        deps=[source_asset_key(model)],
        io_manager_key=IO_MANAGER_KEY,
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=MAX_PARTITIONS_PER_RUN),
        required_resource_keys={"spark", "incsync", source_resource_key(model.source), *destination_keys},
        kinds={"spark", *sorted({d.kind for d in config.destinations})[:2]},  # Dagster shows at most 3
        description=model_description(config, model),
        freshness_policy=freshness_policy(config, model),  # a stopped schedule shows in the UI (freshness.py)
        metadata={
            "primary_key": ", ".join(model.primary_key), "lookback_seconds": lookback,
            "last_modified_column": model.last_modified_column,
            "window_seconds": model.max_transfer_time_window_seconds, "schedule": model.frequency,
            **({"products": ", ".join(products_with(config, model.model_name)) or "none"} if config.products else {}),
        },
    )
    def _transfer(context: dg.AssetExecutionContext, config: TransferRunConfig) -> dg.Output[TransferPlan]:
        """Plan the run's transfers through the source and destination resources: per recipient, its
        destination and each run of its contiguous windows, as plain values. The IO manager takes the run's
        transfer slots, then reads each destination's state, opens the reads, stages, validates and publishes."""
        mark_running(context.instance, context.run_id)  # a process that dies now leaves an ORPHANED run, not a RUNNING one
        install_range_subsets()  # the output's context holds the run's range as masks, not a key a partition
        grid = run_grid(context, model)  # the run's range, never its list of keys (~700 bytes a key)
        try:
            plan = _plan(context, model, config, grid)
        except Exception as exc:
            tag_blame(context.instance, context.run_id, blame(exc))  # failed before any transfer: the run's own error
            if defers_asset_events(context.run):  # the model's job plans only what fails: all of it did
                report_planned(context.get_step_execution_context(), context.asset_key, grid.keys())
            raise
        return dg.Output(plan)

    return _transfer


@dataclass(frozen=True)
class RunGrid:
    """The (window, recipient) partitions of a run, as Dagster's range names them: every window of
    ``windows`` for every recipient of ``recipients`` (``MultiPartitionsDefinition.get_partition_keys_in_range``
    is this product), held as its two dimensions rather than one key a partition."""

    windows: tuple[str, ...]
    recipients: tuple[str, ...]

    def keys(self) -> list[str]:
        """The run's Dagster partition keys (a failed plan reports them all as planned)."""
        return [str(partition_key(w, r)) for r in self.recipients for w in self.windows]


def run_grid(context: dg.AssetExecutionContext, model: ModelConfig) -> RunGrid:
    """The run's partitions from its key range (a single partition is a range of one): the windows between
    its first and last keys' windows, the recipients between theirs in registration order."""
    first, last = context.partition_key_range
    return grid_between(context.instance, model, first, last)


def grid_between(instance: dg.DagsterInstance, model: ModelConfig, first: str, last: str) -> RunGrid:
    """The partitions of the range ``first`` to ``last`` (Dagster partition keys), as ``run_grid`` reads them."""
    ends = [split_dims(model, key) for key in (first, last)]
    windows = window_partitions(model).get_partition_keys_in_range(dg.PartitionKeyRange(ends[0][0], ends[1][0]))
    registered = instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)  # Dagster's range: this order
    missing = [rid for rid in (ends[0][1], ends[1][1]) if rid not in registered]
    if missing:
        raise dg.DagsterInvalidInvocationError(f"partition range {first} to {last}: no recipient partition {missing}")
    recipients = registered[registered.index(ends[0][1]) : registered.index(ends[1][1]) + 1]
    return RunGrid(tuple(windows), tuple(recipients))


def _refuse_unsubscribed(config: IncsyncConfig, model: ModelConfig, recipient_ids: Iterable[str]) -> None:
    """Fail a run naming a recipient that does not receive ``model`` before Spark, a lease or a destination
    is touched. The recipient partitions are one set shared by every model, so the UI offers such partitions;
    schedules, the sensor and the CLI never launch them."""
    if not config.products:
        return
    held = product_models(config)
    for rid in recipient_ids:
        recipient = config.recipient(rid)
        if not receives(config, recipient, model.model_name, held=held):
            raise NotSubscribedError(f"model {model.model_name}: {not_received(config, recipient, model.model_name)}")


def _plan(context: dg.AssetExecutionContext, model: ModelConfig, config: TransferRunConfig, grid: RunGrid) -> TransferPlan:
    """The run's transfers, planned from its range of partitions; Spark starts warming up meanwhile."""
    resources, tags = context.resources, context.run.tags
    _refuse_unsubscribed(resources.incsync.config, model, grid.recipients)
    spark = SparkWarmUp(resources.spark)
    if grid.windows and grid.recipients:
        spark.start()
    run = TransferRun.for_model(
        resources.incsync.config, model, source=getattr(resources, source_resource_key(model.source)).client(),
        spark=spark.get, scheduled=tags.get(MODE_TAG) == "incremental",
        full_refresh=config.full_refresh or tags.get(FULL_REFRESH_TAG, "").lower() == "true",
        allow_mass_delete=tags.get(ALLOW_MASS_DELETE_TAG, "").lower() == "true",
    )
    windows = [window_of(model, key) for key in sorted(grid.windows)]  # one Window a window, shared by every recipient
    requests = []
    # Per recipient, not per window partition: a year-long backfill of 200 recipients is 79,200 partitions.
    for rid in sorted(grid.recipients):
        recipient = resources.incsync.recipient(rid)
        destination = recipient_destination(resources, recipient)
        requests += [TransferRequest(run=run, recipient=recipient, destination=destination, partition=WindowPartition(w, rid))
                     for w in windows]
    return run.plan(requests)

"""One asset per model, partitioned by window × recipient, downstream of its source table."""


import dagster as dg
from pydantic import Field

from incsync.changes import fingerprint
from incsync.config import IncsyncConfig, ModelConfig
from incsync.partitions import grid_start, model_partitions, split_key
from incsync.resources import destination_resource_key, source_resource_key
from incsync.transfer import TransferRequest

MODE_TAG = "incsync/mode"
FULL_REFRESH_TAG = "incsync/full_refresh"
IO_MANAGER_KEY = "incsync_io_manager"
# UI backfills batch up to this many (window, recipient) partitions into one run: the run reads each
# recipient's contiguous windows once and its recipients with one query, and records every partition
# with its own metadata (see execute.py). 10,000 recipients x one window: 10 runs.
MAX_PARTITIONS_PER_RUN = 1024


class TransferRunConfig(dg.Config):
    """Run configuration of a model's transfers."""

    full_refresh: bool = Field(default=False, description="Reload the recipient's model from its start.")


def model_fingerprint(model: ModelConfig) -> str:
    return fingerprint(
        {
            "columns": model.columns,
            "primary_key": model.primary_key,
            "last_modified_column": model.last_modified_column,
            "last_modified_timezone": model.last_modified_timezone,
            "organization_column": model.organization_column,
            "tenancy": model.tenancy,
            "source_table": model.source_table,
            "source_query": model.source_query,
        }
    )


def source_asset_key(model: ModelConfig) -> dg.AssetKey:
    if model.source_table:
        return dg.AssetKey([model.source, "tables", *model.source_table.split(".")])
    return dg.AssetKey([model.source, "queries", model.model_name])


def model_asset_key(model: ModelConfig) -> dg.AssetKey:
    return dg.AssetKey([model.source, model.model_name])


def source_specs(config: IncsyncConfig) -> list[dg.AssetSpec]:
    """External assets for the source tables, so lineage shows source table → model."""
    specs: dict[dg.AssetKey, dg.AssetSpec] = {}
    for model in config.models:
        key = source_asset_key(model)
        vendor = config.source(model.source).vendor
        description = f"Source table {model.source_table}" if model.source_table else f"Source query of {model.model_name}:\n{model.source_query}"
        specs[key] = dg.AssetSpec(key=key, group_name=model.source, description=description, kinds={vendor})
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
        kinds={"spark"},
        description=f"{model.model_name}: each recipient's rows of {model.source_table or 'a source query'}, "
        f"keyed on {model.primary_key}, changes tracked by {model.last_modified_column}.",
        metadata={"primary_key": ", ".join(model.primary_key), "lookback_seconds": lookback},
    )
    def _transfer(context: dg.AssetExecutionContext, config: TransferRunConfig) -> list[TransferRequest]:
        resources = context.resources
        tags = context.run.tags
        scheduled = tags.get(MODE_TAG) == "incremental"
        full_refresh = config.full_refresh or tags.get(FULL_REFRESH_TAG, "").lower() == "true"
        source = getattr(resources, source_resource_key(model.source)).client()
        requests = []
        for key in sorted(context.partition_keys):
            cell = split_key(model, key)
            recipient = resources.incsync.recipient(cell.recipient_id)
            destination_name = recipient.destination
            kind = resources.incsync.config.destination(destination_name).kind
            destination = getattr(resources, destination_resource_key(kind)).client(destination_name)
            requests.append(
                TransferRequest(
                    model=model,
                    recipient=recipient,
                    partition=cell,
                    grid_start=grid_start(model),
                    lookback_seconds=lookback,
                    fingerprint=code_version,
                    source=source,
                    destination=destination,
                    spark=lambda: resources.spark.spark_session,
                    scheduled=scheduled,
                    full_refresh=full_refresh,
                )
            )
        return requests

    return _transfer

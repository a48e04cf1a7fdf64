"""The IO manager that stages, validates and publishes each transfer an asset hands it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from incsync.errors import IncsyncError
from incsync.metadata import transfer_metadata
from incsync.transfer import TransferRequest, run_transfer


class TransferIOManager(dg.ConfigurableIOManager):
    """Runs every (window, recipient) transfer of the output as its own commit with its own metadata."""

    staging_dir: str = Field(description="Root of the per-transfer staging folders.")

    def handle_output(self, context: dg.OutputContext, obj: list[TransferRequest]) -> None:
        single = len(context.asset_partition_keys) <= 1
        for request in obj:
            outcome = run_transfer(request, staging_root=Path(self.staging_dir))
            metadata = transfer_metadata(outcome, destination=request.destination.name)
            context.log.info(
                "transfer %s committed: %s rows (%s new), high watermark %s",
                outcome.record.transfer_id, outcome.record.rows_transferred,
                outcome.record.delta_rows_transferred, outcome.record.high_watermark,
            )
            if single:
                context.add_output_metadata(metadata)
            else:
                context.step_context.add_asset_metadata(metadata, partition_key=request.partition.key)

    def load_input(self, context: dg.InputContext) -> None:
        raise IncsyncError(
            f"asset {context.asset_key.to_user_string()} is published to each recipient's destination; "
            "read it there (Delta table, PostgreSQL schema or manifests), not as a Dagster input"
        )

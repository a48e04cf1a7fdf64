"""The IO manager that stages, validates and publishes each transfer an asset hands it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from incsync.errors import IncsyncError, LeaseError
from incsync.metadata import transfer_metadata
from incsync.transfer import TransferOutcome, TransferRequest, run_transfer

# A transfer that lost its lease to a concurrent one (two backfill runs of one destination) starts
# over from the new state; a stale writer never publishes, it redoes its work against fresh state.
LEASE_ATTEMPTS = 4


class TransferIOManager(dg.ConfigurableIOManager):
    """Runs every (window, recipient) transfer of the output as its own commit with its own metadata."""

    staging_dir: str = Field(description="Root of the per-transfer staging folders.")

    def handle_output(self, context: dg.OutputContext, obj: list[TransferRequest]) -> None:
        single = len(context.asset_partition_keys) <= 1
        committed: list[tuple[TransferRequest, dict[str, dg.MetadataValue]]] = []
        for request in obj:
            try:
                outcome = _run_with_lease(context, request, Path(self.staging_dir))
            except Exception:
                if not single:
                    _record_committed(context, committed)
                raise
            metadata = transfer_metadata(outcome, destination=request.destination.name)
            context.log.info(
                "transfer %s committed: %s rows (%s new), high watermark %s",
                outcome.record.transfer_id, outcome.record.rows_transferred,
                outcome.record.delta_rows_transferred, outcome.record.high_watermark,
            )
            committed.append((request, metadata))
            if single:
                context.add_output_metadata(metadata)
            else:
                context.step_context.add_asset_metadata(metadata, partition_key=request.partition.key)

    def load_input(self, context: dg.InputContext) -> None:
        raise IncsyncError(
            f"asset {context.asset_key.to_user_string()} is published to each recipient's destination; "
            "read it there (Delta table, PostgreSQL schema or manifests), not as a Dagster input"
        )


def _record_committed(context: dg.OutputContext, committed: list[tuple[TransferRequest, dict[str, dg.MetadataValue]]]) -> None:
    """A run covering several partitions failed part-way: the windows committed before the failure
    stay committed, so say so, and a backfill retried from failure resumes at the failed window."""
    for request, metadata in committed:
        context.log_event(dg.AssetMaterialization(asset_key=context.asset_key, partition=str(request.partition.key), metadata=metadata))


def _run_with_lease(context: dg.OutputContext, request: TransferRequest, staging_root: Path) -> TransferOutcome:
    for attempt in range(1, LEASE_ATTEMPTS + 1):
        try:
            return run_transfer(request, staging_root=staging_root)
        except LeaseError as exc:
            if attempt == LEASE_ATTEMPTS:
                raise
            context.log.warning("%s (attempt %s of %s; starting over from the new state)", exc, attempt, LEASE_ATTEMPTS)
    raise AssertionError("unreachable")

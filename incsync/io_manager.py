"""The IO manager: plans the run's partitions into transfers and publishes them (see ``execute``)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from incsync.dagster_compat import add_partition_metadata
from incsync.errors import IncsyncError
from incsync.execute import SpanFailure, TransferFailures, execute
from incsync.metadata import transfer_metadata
from incsync.transfer import TransferOutcome, TransferRequest


class TransferIOManager(dg.ConfigurableIOManager):
    """Runs the output's (window, recipient) partitions as coalesced transfers; every partition gets
    its own materialization with exact metadata, and a failure fails only the partitions it touched."""

    staging_dir: str = Field(description="Root of the per-transfer staging folders.")

    def handle_output(self, context: dg.OutputContext, obj: list[TransferRequest]) -> None:
        single = len(context.asset_partition_keys) <= 1
        committed: list[tuple[TransferRequest, dict[str, dg.MetadataValue]]] = []

        def on_commit(request: TransferRequest, outcome: TransferOutcome) -> None:
            metadata = transfer_metadata(outcome, destination=request.destination.name)
            if outcome.first_of_commit:  # one line per commit: every event costs a write to the event log
                context.log.info(
                    "transfer %s committed %s rows of recipient %s from window %s (%s window(s) in the transfer), "
                    "high watermark %s",
                    outcome.record.transfer_id, outcome.commit_rows, request.recipient.id, request.partition.window_key,
                    outcome.windows_in_transfer, outcome.record.high_watermark,
                )
            committed.append((request, metadata))
            if single:
                context.add_output_metadata(metadata)

        failures = execute(obj, staging_root=Path(self.staging_dir), on_commit=on_commit)
        if not failures:
            if not single:
                add_partition_metadata(context, {str(r.partition.key): md for r, md in committed})
            return
        if not single:
            _record_committed(context, committed)
        for failure in failures:
            context.log.error(
                "recipient %s: %s window(s) not committed: %s", failure.recipient_id, len(failure.requests), failure.error
            )
        raise _combined(failures)

    def load_input(self, context: dg.InputContext) -> None:
        raise IncsyncError(
            f"asset {context.asset_key.to_user_string()} is published to each recipient's destination; "
            "read it there (Delta table, PostgreSQL schema or manifests), not as a Dagster input"
        )


def _combined(failures: list[SpanFailure]) -> BaseException:
    """One incsync error is raised as itself; anything else, or several, becomes one error naming each recipient."""
    if len(failures) == 1 and isinstance(failures[0].error, IncsyncError):
        return failures[0].error
    lines = [f"{f.recipient_id}: {type(f.error).__name__}: {f.error}" for f in failures]
    recipients = sorted({f.recipient_id for f in failures})
    head = f"recipient {recipients[0]} failed" if len(failures) == 1 else f"{len(recipients)} recipients failed, the others committed"
    error = TransferFailures(f"{head}:\n  " + "\n  ".join(lines))
    error.__cause__ = failures[0].error
    return error


def _record_committed(context: dg.OutputContext, committed: list[tuple[TransferRequest, dict[str, dg.MetadataValue]]]) -> None:
    """A run covering several partitions failed part-way: the windows committed before the failure
    stay committed, so say so, and a backfill retried from failure resumes at the failed window."""
    for request, metadata in committed:
        context.log_event(dg.AssetMaterialization(asset_key=context.asset_key, partition=str(request.partition.key), metadata=metadata))

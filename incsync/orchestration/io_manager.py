"""The IO manager: publishes a model's planned transfers (``transfer.execute``) while it holds the run's
transfer slots (``slots.run_holding``), reports each commit's materializations as it lands, and gives
downstream assets a reader of the published copies. It reaches the configuration and the destinations
through the run's resources (``incsync`` and each destination kind's), which it declares."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import dagster as dg

from incsync.config.tags import ERROR_TAG
from incsync.core.blame import Blame, blame
from incsync.destinations.readers import PublishedCopies
from incsync.errors import IncsyncError
from incsync.operations.blame import failure_metadata, recipient_blames, run_level, tag_blame
from incsync.operations.dagster_compat import (
    add_partition_metadata,
    defers_asset_events,
    materialization_reporter,
    store_events_in_batches,
)
from incsync.operations.metadata import partition_page, transfer_metadata
from incsync.operations.partitions import dagster_key, split_key
from incsync.operations.reporting import RunReporter
from incsync.operations.slots import run_holding
from incsync.orchestration.resources import destination_resource_key, recipient_destination
from incsync.transfer import progress
from incsync.transfer.errors import TransferFailures
from incsync.transfer.request import SpanFailure, TransferOutcome, TransferPlan, TransferRequest


def transfer_io_manager(
    *, staging_dir: str, staging_storage_options: Mapping[str, str], kinds: Iterable[str],
) -> dg.IOManagerDefinition:
    """The IO manager of a configuration whose destinations are of ``kinds``: it needs the ``incsync``
    resource and those kinds' destination resources."""

    @dg.io_manager(
        config_schema={
            "staging_dir": dg.Field(str, default_value=staging_dir, description=(
                "Root of the per-transfer staging folders: a local path or an object-store URL.")),
            "staging_storage_options": dg.Field(dg.Map(str, str), default_value=dict(staging_storage_options), description=(
                "storage_options of an object-store staging_dir (secrets as `<name>_env`).")),
        },
        required_resource_keys={"incsync", *(destination_resource_key(kind) for kind in sorted(set(kinds)))},
        description="Publishes a model's planned transfers; a downstream input reads each recipient's published copy.",
    )
    def _manager(init_context: dg.InitResourceContext) -> TransferIOManager:
        store_events_in_batches()  # a run's process: its asset events reach the event log in batches
        settings = init_context.resource_config
        return TransferIOManager(staging_dir=settings["staging_dir"], staging_storage_options=settings["staging_storage_options"],
                                 resources=init_context.resources, instance=init_context.instance)

    return _manager


class TransferIOManager(dg.IOManager):
    """Runs the output's (window, recipient) partitions as their planned transfers; every partition gets
    its own materialization with exact metadata, and a failure fails only the partitions it touched."""

    def __init__(self, *, staging_dir: str, staging_storage_options: Mapping[str, str], resources: Any,
                 instance: dg.DagsterInstance | None) -> None:
        self._staging_dir, self._staging_options = staging_dir, dict(staging_storage_options)
        self._resources = resources
        self._instance = instance  # the run's: transfer slots and the error tag live there

    def _run_instance(self) -> dg.DagsterInstance:
        if self._instance is None:
            raise IncsyncError("the transfer IO manager publishes only inside a Dagster run (it has no instance)")
        return self._instance

    def handle_output(self, context: dg.OutputContext, obj: TransferPlan) -> None:
        """Take the run's transfer slots, then open, stage, validate and publish the planned transfers; report
        each commit as it lands. The slots are released when the block ends, whatever happened in it."""
        # Imported here, in the run: the transfer engine and the staging store load pyarrow (and pandas with its
        # datasets), ~110 MB that every code server would hold only to serve definitions (the daemon keeps
        # several at once).
        from incsync.storage.files import staging_root
        from incsync.transfer.execute import execute

        instance = self._run_instance()
        single = len(obj.requests) <= 1  # the asset made one request per partition of the run
        # A run of the model's job reports its own partitions (``reporting.RunReporter``): each commit's
        # windows within a second of landing, so a long backfill shows its progress, and only slow or
        # failed transfers' windows as planned; otherwise (an asset-page backfill, ``dg.materialize``)
        # Dagster planned every partition when it created the run and materializes them when the step ends.
        deferred = defers_asset_events(instance.get_run_by_id(context.run_id))
        committed: list[tuple[TransferRequest, dict[str, dg.MetadataValue]]] = []
        # A full refresh also delivers windows its run was not given (docs/design.md#the-partition-view): a run
        # Dagster planned cannot record those at the step's end, so they are stored as events of their own.
        given = {r.partition.key for r in obj.requests} if not deferred else set()  # a model's job reports its own
        beyond: list[dg.AssetMaterialization] = []
        reporter = RunReporter.for_output(context) if deferred else None
        started: list[Sequence[TransferRequest]] = []  # the spans that started (their own tuples), not a key a partition

        def on_start(requests: Sequence[TransferRequest]) -> None:
            started.append(requests)
            if reporter is not None:
                reporter.started(requests)

        def on_commit(request: TransferRequest, outcome: TransferOutcome) -> None:
            record_url = None
            if not outcome.detailed and outcome.record_window is not None:
                record_url = partition_page(context.asset_key, str(dagster_key(outcome.record_window)))
            metadata = transfer_metadata(outcome, destination=request.destination.name, record_url=record_url,
                                         path=destination_path(request) if outcome.detailed else None)
            line = None
            if outcome.first_of_commit:  # one line per commit: every event costs a write to the event log
                line = (f"transfer {outcome.record.transfer_id} committed {outcome.commit_rows} rows of recipient "
                        f"{request.recipient.id} from window {request.partition.window_key} ({outcome.windows_in_transfer} "
                        f"window(s) in the transfer), high watermark {outcome.record.high_watermark}")
                if reporter is None:
                    context.log.info(line)
            record = outcome.record
            progress.committed(progress.Committed(
                context.run_id, request.model.model_name, request.recipient.id, request.partition.window_key,
                record.rows_transferred, record.delta_rows_transferred, record.high_watermark, record.transfer_type,
            ))
            materialization = dg.AssetMaterialization(asset_key=context.asset_key, partition=str(dagster_key(request.partition)),
                                                      metadata=metadata)
            if reporter is not None:  # a model's job: reported as its commit lands
                reporter.committed(request, (request.recipient.id, outcome.record.transfer_id, outcome.batch),
                                   materialization, last_of_commit=outcome.last_of_commit, line=line)
                return
            if request.partition.key not in given:
                beyond.append(materialization)
                return
            committed.append((request, metadata))  # Dagster records these partitions at the step's end
            if single:
                context.add_output_metadata(metadata)

        root = staging_root(self._staging_dir, self._staging_options)
        with reporter or contextlib.nullcontext():
            try:
                with run_holding(obj, run_id=context.run_id, instance=instance, log=context.log):
                    failures = execute(obj, staging_root=root, on_commit=on_commit, on_start=on_start)
            except Exception as exc:
                # Failed outside any one transfer (say its slots could not be taken): the run's own error;
                # the windows that never started show as failed, the reporter plans those at work.
                tag_blame(instance, context.run_id, blame(exc))
                if reporter is not None:
                    began = {r.partition.key for span in started for r in span}
                    reporter.failed(r for r in obj.requests if r.partition.key not in began)
                raise
            finally:
                if beyond:  # whatever committed is recorded, however the run ends
                    materialization_reporter(context)(beyond)
            if failures and reporter is not None:
                reporter.failed(r for f in failures for r in f.requests)
        if not failures:
            if not single and not deferred:
                add_partition_metadata(context, {str(dagster_key(r.partition)): md for r, md in committed})
            return
        if not single and not deferred:
            _record_committed(context, committed)
        error = _combined(failures)
        tag_error(instance, context.run_id, error)
        blames = recipient_blames(failures)
        tag_blame(instance, context.run_id, run_level(blames, recipients=obj.recipients))
        raise transfer_failure(obj.run.model.model_name, failures, blames, run_recipients=obj.recipients) from error

    def load_input(self, context: dg.InputContext) -> PublishedCopies:
        """A reader of each recipient's published copy (a Delta table, a SQL relation, the manifested files):
        the input's recipients when the downstream asset shares the recipient partitions, else every enabled one
        that receives the model."""
        incsync = self._resources.incsync
        config = incsync.config
        name = context.asset_key.path[-1]
        try:
            model = config.model(name)
        except KeyError:
            raise IncsyncError(f"asset {context.asset_key.to_user_string()}: no model {name!r} in {incsync.config_path}") from None
        if context.has_partition_key and context.has_asset_partitions:  # never list a whole grid
            ids = sorted({split_key(model, key).recipient_id for key in context.asset_partition_keys})
        else:
            from incsync.config.products import subscribers

            ids = [r.id for r in subscribers(config, model.model_name)]
        copies = {}
        for rid in ids:
            recipient = incsync.recipient(rid)
            copies[rid] = (recipient, recipient_destination(self._resources, recipient))
        return PublishedCopies(model, copies)


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


def transfer_failure(
    model: str, failures: list[SpanFailure], blames: dict[str, Blame] | None = None, *, run_recipients: int = 1,
) -> dg.Failure:
    """The run's failure as Dagster shows it: for each recipient that failed, the windows it did not
    commit, why, and whose it is to fix (raised as is, not wrapped in "Error occurred while handling output")."""
    blames = blames if blames is not None else recipient_blames(failures)
    windows: dict[str, list[str]] = {}
    lines = []
    for f in failures:
        keys = sorted(r.partition.window_key for r in f.requests)
        windows.setdefault(f.recipient_id, []).extend(keys)
        lines.append(f"model {model}, recipient {f.recipient_id}, {_windows_text(keys)}: {_reason(f.error, model, f.recipient_id)}"
                     f"\n    blamed {blames[f.recipient_id]}")
    recipients = sorted(windows)
    if len(lines) == 1:
        description, error = lines[0], f"{type(failures[0].error).__name__}: {failures[0].error}"
    else:
        description = f"model {model}: {len(recipients)} recipient(s) failed:\n  " + "\n  ".join(lines)
        error = "\n".join(f"{f.recipient_id}: {type(f.error).__name__}: {f.error}" for f in failures)
    return dg.Failure(description=description, metadata={
        "model": model,
        "recipient": ", ".join(recipients),
        "windows": dg.MetadataValue.json({rid: sorted(windows[rid]) for rid in recipients}),
        "error": error,
        **failure_metadata(blames, recipients=run_recipients),
    })


def _reason(error: BaseException, model: str, recipient: str) -> str:
    """The error's class and message, without the "model m, recipient r: " the line names already."""
    text = str(error)
    for named in (f"model {model}, recipient {recipient}: ", f"model {model}: "):
        text = text.removeprefix(named)
    return f"{type(error).__name__}: {text}"


def _windows_text(keys: list[str]) -> str:
    if not keys:
        return "every window committed"
    if len(keys) == 1:
        return f"window {keys[0]} not committed"
    return f"windows {keys[0]} .. {keys[-1]} ({len(keys)}) not committed"


def destination_path(request: TransferRequest) -> str | None:
    """Where the recipient's copy of the model is when it is files (a Delta table, an object-storage folder)."""
    return request.destination.location(model=request.model, recipient=request.recipient).path


MAX_TAG_VALUE = 255


def first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text.splitlines()[0] if text else type(error).__name__


def tag_error(instance: dg.DagsterInstance, run_id: str, error: BaseException) -> None:
    """Tag the run with its error's first line (``incsync transfers`` shows it without reading the run's events)."""
    try:
        line = first_line(error)
        if len(line) > MAX_TAG_VALUE:
            line = line[: MAX_TAG_VALUE - 1] + "…"
        instance.add_run_tags(run_id, {ERROR_TAG: line})
    except Exception:  # noqa: BLE001 - the tag is a convenience; the run's failure is what matters
        pass


def _record_committed(context: dg.OutputContext, committed: list[tuple[TransferRequest, dict[str, dg.MetadataValue]]]) -> None:
    """A run covering several partitions failed part-way: the windows committed before the failure
    stay committed, so say so, and a backfill retried from failure resumes at the failed window."""
    for request, metadata in committed:
        partition = str(dagster_key(request.partition))
        context.log_event(dg.AssetMaterialization(asset_key=context.asset_key, partition=partition, metadata=metadata))

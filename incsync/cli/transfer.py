"""`incsync transfer`: the windows each recipient is due, planned (--dry-run), run here through Dagster or
handed to a resident worker as its protocol's typed request; and `incsync transfers`, the record of them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Standard library, incsync.paths and the errors and worker command modules (which import the same) only at
# import time: `incsync transfer --worker` stays a thin client.
from incsync.errors import ConfigError, InputError
from incsync.paths import config_path
from incsync.worker.command import Resident, TransferCommand

if TYPE_CHECKING:
    from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig


def transfer_command(args: argparse.Namespace) -> TransferCommand:
    """What ``incsync transfer`` was asked, parsed once."""
    return TransferCommand(
        model=args.model, recipients=tuple(args.recipient or ()), window=args.window, backfill=bool(args.backfill),
        full_refresh=bool(args.full_refresh), tags=tuple(args.tag or ()), from_=args.from_, to=args.to,
        json=bool(args.json), verbose=bool(getattr(args, "verbose", False)), dry_run=bool(args.dry_run),
        allow_mass_delete=bool(args.allow_mass_delete),
    )


def transfer_request(args: argparse.Namespace) -> dict[str, object]:
    """What ``incsync transfer`` was asked, as the worker protocol's typed fields."""
    return transfer_command(args).wire()


def cmd_transfer(args: argparse.Namespace) -> int:
    return run_transfer(transfer_command(args), config=args.config, resident=args.resident, worker=args.worker,
                        auto=not getattr(args, "no_worker", False))


def run_transfer(command: TransferCommand, *, config: str | None, resident: Resident | None, worker: str | None = None,
                 auto: bool = False) -> int:
    """Run ``command`` here, or hand it to the worker at ``worker`` (else ``$INCSYNC_WORKER``), else (``auto``) to
    the config's automatic worker (``incsync.worker.auto``), unless it must run here."""
    from incsync.worker.client import WORKER_ENV_VAR, forward  # standard library only

    dry_run, as_json = command.dry_run, command.json
    ranged = command.from_ or command.to
    # A dry run and --allow-mass-delete run here (its help says so): the worker's request does not carry them.
    here = bool(resident) or command.runs_here
    socket = None if here else (worker or os.environ.get(WORKER_ENV_VAR))
    if socket:
        return forward(socket, command=command, config=config)
    if auto and not here:
        from incsync.worker import auto as auto_worker  # standard library only
        from incsync.worker.errors import WorkerUnavailable

        if auto_worker.wanted(config_path(config)):
            try:
                return auto_worker.run(command, config_path(config))
            except WorkerUnavailable as exc:
                print(f"incsync: {exc}; running the transfer in this process", file=sys.stderr, flush=True)

    from incsync.cli.windows import backfill_windows, window_key
    from incsync.config.load import load_config
    from incsync.config.products import not_received, receives, subscribers
    from incsync.config.tags import BACKFILL, INCREMENTAL, parse_tags, reported_mode, user_run_tags
    from incsync.core.windows import recipient_windows, scheduled_windows
    from incsync.errors import NotSubscribedError
    from incsync.operations.runs import MANUAL

    file = config_path(config)
    loaded = load_config(file)
    try:
        model = loaded.model(command.model)
        recipients = [loaded.recipient(r) for r in dict.fromkeys(command.recipients)] if command.recipients else (
            subscribers(loaded, model.model_name))
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    if refused := [r for r in recipients if not receives(loaded, r, model.model_name)]:
        raise NotSubscribedError("\n".join(not_received(loaded, r, model.model_name) for r in refused))
    user_tags = user_run_tags(parse_tags(command.tags))
    if not recipients:
        print(f"model {model.model_name}: no enabled recipient receives it; add one to {file}"
              + (" or add the model to a product of one" if loaded.products else ""))
        return 0
    if command.window:
        if ranged:
            raise InputError("--window names one window; --from/--to name a range: use one or the other")
        key = window_key(model, command.window, flag="--window", exact=True)
        windows = {r.id: [key] for r in recipients}
        mode = MANUAL
    elif command.backfill or ranged:
        windows = {r.id: backfill_windows(model, [w.key for w in recipient_windows(model, r)], command.from_, command.to)
                   for r in recipients}
        mode = BACKFILL
    else:
        tick = [w.key for w in scheduled_windows(model)]
        windows = {r.id: tick for r in recipients}
        mode = INCREMENTAL
    shared: dict[str, str] = {}  # one string a window for every recipient: 10,000 recipients × 395 windows hold 395
    windows = {rid: [shared.setdefault(k, k) for k in keys] for rid, keys in windows.items() if keys}
    if not windows:
        why = "no window in --from/--to" if ranged else "no window has started yet (min_start_time_epoch is in the future)"
        if as_json:
            from incsync.cli.output import print_json

            print_json({"model": model.model_name, "mode": reported_mode(mode, full_refresh=command.full_refresh),
                        "runs": [], "note": why})
        else:
            print(f"model {model.model_name}: {why}")
        return 0
    if dry_run:
        return _dry_run(loaded, model, [r for r in recipients if r.id in windows], windows, mode=mode,
                        full_refresh=command.full_refresh, as_json=as_json)
    return _launch(command, resident, file, loaded, model, recipients, windows, mode=mode, user_tags=user_tags)


def _dry_run(config: IncsyncConfig, model: ModelConfig, recipients: list[RecipientConfig], windows: dict[str, list[str]], *,
             mode: str, full_refresh: bool, as_json: bool) -> int:
    from incsync.cli.output import print_json
    from incsync.config.tags import INCREMENTAL, reported_mode
    from incsync.transfer.dry_run import dry_run_lines, dry_run_transfers

    previewed = dry_run_transfers(config, model, recipients, windows, scheduled=mode == INCREMENTAL, full_refresh=full_refresh)
    runs = -(-len(previewed) // config.recipients_per_run)
    shown = reported_mode(mode, full_refresh=full_refresh)
    if as_json:
        print_json({"model": model.model_name, "mode": shown, "dry_run": True, "runs": runs,
                    "transfers": [p.as_dict() for p in previewed]})
    else:
        for line in dry_run_lines(model, previewed, mode=shown, runs=runs):
            print(line)
    return 0


def _launch(command: TransferCommand, resident: Resident | None, file: Path, config: IncsyncConfig, model: ModelConfig,
            recipients: list[RecipientConfig], windows: dict[str, list[str]], *, mode: str, user_tags: dict[str, str]) -> int:
    from incsync.cli.output import print_json
    from incsync.cli.progress import Progress, RecipientLines
    from incsync.config.tags import ALLOW_MASS_DELETE_TAG, reported_mode
    from incsync.operations.instance import dagster_instance
    from incsync.operations.launch import register, run_specs
    from incsync.operations.runs import run_in_process
    from incsync.orchestration.definitions import build_definitions
    from incsync.transfer import progress as progress_events

    as_json = command.json
    defs, instance = resident(file) if resident else (build_definitions(file), dagster_instance(file))
    from incsync.operations.liveness import reap
    from incsync.staging.folders import default_staging_dir

    reap(instance, staging_root=Path(default_staging_dir(config)))
    specs = run_specs(
        config, model, recipients, windows={rid: (keys[0], keys[-1]) for rid, keys in windows.items()},
        registered=register(instance, list(windows)), mode=mode, full_refresh=command.full_refresh,
        user_tags={**user_tags, **({ALLOW_MASS_DELETE_TAG: "true"} if command.allow_mass_delete else {})},
    )
    n_windows = sum(len(k) for k in windows.values())
    first = min(k[0] for k in windows.values())
    last = max(k[-1] for k in windows.values())
    who = next(iter(windows)) if len(windows) == 1 else f"{len(windows)} recipients"
    runs = f" in {len(specs)} runs" if len(specs) > 1 else ""
    if not as_json:
        print(f"transfer {model.model_name} → {who}: {n_windows} window(s) {first} .. {last}{runs}", flush=True)
    bar = Progress(total=n_windows, recipients={rid: len(k) for rid, k in windows.items()}, enabled=not as_json)
    # A line per recipient (its windows' totals), or with --verbose a line per window partition.
    summaries = RecipientLines({rid: len(keys) for rid, keys in windows.items()}, lambda text: print(text, flush=True))
    shown = None if as_json else (lambda line: print(line, flush=True)) if command.verbose else summaries.add
    with bar, progress_events.listening(lambda c: bar.committed(c.recipient, c.window, c.rows)):
        results = run_in_process(defs, instance, specs, windows=windows, progress=shown)
    if not as_json:
        summaries.flush()
    failed = [r for r in results if not r.success]
    if as_json:
        print_json({
            "model": model.model_name, "mode": reported_mode(mode, full_refresh=command.full_refresh), "ok": not failed,
            "runs": [{"run_id": r.run_id, "success": r.success, "error": r.error,
                      "transfers": [dict(vars(line)) for line in r.lines]} for r in results],
        })
    for result in failed:
        print(f"error: {result.error or 'transfer failed; see run ' + result.run_id + ' in the Dagster UI'}", file=sys.stderr)
    if not as_json and n_windows > 1 and not failed:
        print(f"done: {bar.line()}", flush=True)
    return 1 if failed else 0


def cmd_transfers(args: argparse.Namespace) -> int:
    from incsync.cli.output import print_json, transfers_lines
    from incsync.config.load import load_config
    from incsync.config.tags import parse_tags
    from incsync.operations.instance import dagster_instance
    from incsync.operations.liveness import reap
    from incsync.operations.statuses import counts_by_model, list_transfers
    from incsync.staging.folders import default_staging_dir

    file = config_path(args.config)
    config = load_config(file)
    instance = dagster_instance(file)
    reap(instance, staging_root=Path(default_staging_dir(config)))  # dead transfers show as ORPHANED, not RUNNING
    transfers = list_transfers(
        instance, config, recipient=args.recipient, status=args.status,
        tags=parse_tags(args.tag or []), limit=args.limit, blamed=args.blamed, product=getattr(args, "product", None),
    )
    if getattr(args, "json", False):
        print_json([{
            "run_id": t.run_id, "created_at": t.created_at, "status": t.status.value, "mode": t.mode,
            "models": list(t.models), "recipients": list(t.recipients), "windows": t.partitions_committed,
            "rows_transferred": t.rows_transferred, "delta_rows_transferred": t.delta_rows_transferred,
            "duration_seconds": None if t.duration_seconds is None else round(t.duration_seconds, 3),
            "owners": list(t.owners), "tags": t.tags, "error": t.error,
            "blamed": t.blamed, "blame_reason": t.blame_reason,
        } for t in transfers])
        return 0
    for line in transfers_lines(transfers):
        print(line)
    for model, counts in sorted(counts_by_model(transfers).items()):
        print(f"{model}: " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items())))
    return 0

"""`incsync transfer`: the windows each recipient is due, planned (--dry-run), run here through Dagster or
handed to a resident worker as its protocol's typed request; and `incsync transfers`, the record of them."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

# Standard library, incsync.errors and incsync.paths only at import time: `incsync transfer --worker` stays a thin client.
from incsync.errors import ConfigError, InputError
from incsync.paths import config_path

if TYPE_CHECKING:
    import dagster as dg

Resident = Callable[[Path], "tuple[dg.Definitions, dg.DagsterInstance]"]


def cmd_transfer(args: argparse.Namespace) -> int:
    from incsync.worker.client import WORKER_ENV_VAR, forward  # standard library only

    resident: Resident | None = args.resident
    dry_run, as_json = getattr(args, "dry_run", False), getattr(args, "json", False)
    ranged = getattr(args, "from_", None) or getattr(args, "to", None)
    # --allow-mass-delete runs here (its help says so): the worker's request does not carry it.
    here = resident or dry_run or getattr(args, "allow_mass_delete", False)
    worker = None if here else (args.worker or os.environ.get(WORKER_ENV_VAR))
    if worker:
        return forward(worker, transfer=transfer_request(args), config=args.config)

    from incsync.config.tags import BACKFILL, INCREMENTAL, parse_tags, user_run_tags
    from incsync.cli.windows import backfill_windows, window_key
    from incsync.config.load import load_config
    from incsync.core.windows import recipient_windows, scheduled_windows
    from incsync.orchestration.runs import MANUAL

    file = config_path(args.config)
    config = load_config(file)
    try:
        model = config.model(args.model)
        recipients = [config.recipient(r) for r in dict.fromkeys(args.recipient)] if args.recipient else [
            r for r in config.recipients if r.enabled
        ]
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    user_tags = user_run_tags(parse_tags(args.tag or []))
    if not recipients:
        print(f"model {model.model_name}: no enabled recipient; add one to {file}")
        return 0
    if args.window:
        if ranged:
            raise InputError("--window names one window; --from/--to name a range: use one or the other")
        key = window_key(model, args.window, flag="--window", exact=True)
        windows = {r.id: [key] for r in recipients}
        mode = MANUAL
    elif args.backfill or ranged:
        windows = {r.id: backfill_windows(model, [w.key for w in recipient_windows(model, r)], getattr(args, "from_", None),
                                          getattr(args, "to", None)) for r in recipients}
        mode = BACKFILL
    else:
        tick = [w.key for w in scheduled_windows(model)]
        windows = {r.id: tick for r in recipients}
        mode = INCREMENTAL
    windows = {rid: keys for rid, keys in windows.items() if keys}
    if not windows:
        why = "no window in --from/--to" if ranged else "no window has started yet (min_start_time_epoch is in the future)"
        if as_json:
            from incsync.cli.output import print_json

            print_json({"model": model.model_name, "mode": mode, "runs": [], "note": why})
        else:
            print(f"model {model.model_name}: {why}")
        return 0
    if dry_run:
        return _dry_run(config, model, [r for r in recipients if r.id in windows], windows, mode=mode,
                        full_refresh=args.full_refresh, as_json=as_json)
    return _execute(args, file, config, model, recipients, windows, mode=mode, user_tags=user_tags, as_json=as_json)


def _dry_run(config, model, recipients, windows, *, mode: str, full_refresh: bool, as_json: bool) -> int:  # noqa: ANN001
    from incsync.config.tags import INCREMENTAL
    from incsync.cli.output import print_json
    from incsync.transfer.dry_run import plan_lines, plan_transfer

    planned = plan_transfer(config, model, recipients, windows, scheduled=mode == INCREMENTAL, full_refresh=full_refresh)
    runs = -(-len(planned) // config.recipients_per_run)
    if as_json:
        print_json({"model": model.model_name, "mode": mode, "dry_run": True, "runs": runs,
                    "transfers": [p.as_dict() for p in planned]})
    else:
        for line in plan_lines(model, planned, mode=mode, runs=runs):
            print(line)
    return 0


def _execute(args, file, config, model, recipients, windows, *, mode: str, user_tags, as_json: bool) -> int:  # noqa: ANN001
    from incsync.transfer import progress as progress_events
    from incsync.cli.output import Progress, print_json
    from incsync.orchestration.launch import plan_runs, register
    from incsync.orchestration.definitions import build_definitions
    from incsync.orchestration.runs import dagster_instance, execute_runs
    from incsync.config.tags import ALLOW_MASS_DELETE_TAG

    resident: Resident | None = args.resident
    defs, instance = resident(file) if resident else (build_definitions(file), dagster_instance(file))
    from incsync.orchestration.liveness import reap
    from incsync.orchestration.resources import default_staging_dir

    reap(instance, staging_root=Path(default_staging_dir(config)))
    specs = plan_runs(
        config, model, recipients, windows={rid: (keys[0], keys[-1]) for rid, keys in windows.items()},
        registered=register(instance, list(windows)), mode=mode, full_refresh=args.full_refresh,
        user_tags={**user_tags,
                   **({ALLOW_MASS_DELETE_TAG: "true"} if getattr(args, "allow_mass_delete", False) else {})},
    )
    n_windows = sum(len(k) for k in windows.values())
    first = min(k[0] for k in windows.values())
    last = max(k[-1] for k in windows.values())
    who = next(iter(windows)) if len(windows) == 1 else f"{len(windows)} recipients"
    runs = f" in {len(specs)} runs" if len(specs) > 1 else ""
    if not as_json:
        print(f"transfer {model.model_name} → {who}: {n_windows} window(s) {first} .. {last}{runs}", flush=True)
    bar = Progress(total=n_windows, recipients={rid: len(k) for rid, k in windows.items()}, enabled=not as_json)
    with bar, progress_events.listening(lambda _m, rid, window, rows: bar.committed(rid, window, rows)):
        results = execute_runs(defs, instance, specs, windows=windows,
                               progress=None if as_json else lambda line: print(line, flush=True))
    failed = [r for r in results if not r.success]
    if as_json:
        print_json({
            "model": model.model_name, "mode": mode, "ok": not failed,
            "runs": [{"run_id": r.run_id, "success": r.success, "error": r.error,
                      "transfers": [dict(vars(line)) for line in r.lines]} for r in results],
        })
    for result in failed:
        print(f"error: {result.error or 'transfer failed; see run ' + result.run_id + ' in the Dagster UI'}", file=sys.stderr)
    if not as_json and n_windows > 1 and not failed:
        print(f"done: {bar.line()}", flush=True)
    return 1 if failed else 0


def transfer_request(args: argparse.Namespace) -> dict[str, object]:
    """What ``incsync transfer`` was asked, as the worker protocol's typed fields."""
    return {
        "model": args.model,
        "recipients": list(args.recipient or []),
        "window": args.window,
        "backfill": bool(args.backfill),
        "full_refresh": bool(args.full_refresh),
        "tags": list(args.tag or []),
        "from": getattr(args, "from_", None),
        "to": getattr(args, "to", None),
        "json": bool(getattr(args, "json", False)),
    }


def cmd_transfers(args: argparse.Namespace) -> int:
    from incsync.orchestration.statuses import counts_by_model, list_transfers
    from incsync.config.tags import parse_tags
    from incsync.cli.output import print_json, transfers_lines
    from incsync.config.load import load_config
    from incsync.orchestration.runs import dagster_instance

    from incsync.orchestration.liveness import reap
    from incsync.orchestration.resources import default_staging_dir

    file = config_path(args.config)
    config = load_config(file)
    instance = dagster_instance(file)
    reap(instance, staging_root=Path(default_staging_dir(config)))  # dead transfers show as ORPHANED, not RUNNING
    transfers = list_transfers(
        instance, config, recipient=args.recipient, status=args.status,
        tags=parse_tags(args.tag or []), limit=args.limit,
    )
    if getattr(args, "json", False):
        print_json([{
            "run_id": t.run_id, "created_at": t.created_at, "status": t.status.value, "mode": t.mode,
            "models": list(t.models), "recipients": list(t.recipients), "windows": t.partitions_committed,
            "rows_transferred": t.rows_transferred, "delta_rows_transferred": t.delta_rows_transferred,
            "duration_seconds": None if t.duration_seconds is None else round(t.duration_seconds, 3),
            "owners": list(t.owners), "tags": t.tags, "error": t.error,
        } for t in transfers])
        return 0
    for line in transfers_lines(transfers):
        print(line)
    for model, counts in sorted(counts_by_model(transfers).items()):
        print(f"{model}: " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items())))
    return 0

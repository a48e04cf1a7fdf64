"""The `incsync` command: validate, demo, transfer — the same Dagster definitions the UI uses."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

# Standard library and incsync.errors only at import time: `incsync transfer --worker` stays a thin client.
from incsync.errors import ConfigError, IncsyncError, InputError
from incsync.paths import config_path

if TYPE_CHECKING:
    import dagster as dg

Resident = Callable[[Path], "tuple[dg.Definitions, dg.DagsterInstance]"]


def load_config(path: str | None):  # noqa: ANN201 - IncsyncConfig, imported lazily with pydantic
    from incsync.config import load_config as load

    return load(path)


def cmd_validate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    print(
        f"{config_path(args.config)}: OK ({len(config.sources)} sources, {len(config.destinations)} destinations, "
        f"{len(config.models)} models, {len(config.recipients)} recipients)"
    )
    from incsync.locations import location_notes

    for note in location_notes(config, Path.cwd()):
        print(f"note: {note}")
    if args.connect:
        from incsync.checks import check_connectivity

        problems = check_connectivity(config)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        if problems:
            return 1
        print("every source and destination answered")
        from incsync.checks import check_drift  # schema drift (issue 21): informational lines

        for line in check_drift(config):
            print(f"  {line}")
    return 0


def cmd_transfer(args: argparse.Namespace) -> int:
    from incsync.worker import WORKER_ENV_VAR, forward  # standard library only

    resident: Resident | None = args.resident
    worker = None if resident else (args.worker or os.environ.get(WORKER_ENV_VAR))
    if worker:
        return forward(worker, transfer=transfer_request(args), config=args.config)

    from incsync.automation.tags import BACKFILL, INCREMENTAL, parse_tags, user_run_tags
    from incsync.launch import plan_runs, register
    from incsync.project import build_definitions
    from incsync.runner import MANUAL, dagster_instance, execute_runs, recipient_windows, scheduled_windows

    file = config_path(args.config)
    config = load_config(file)
    try:
        model = config.model(args.model)
        recipients = [config.recipient(r) for r in dict.fromkeys(args.recipient)] if args.recipient else [
            r for r in config.recipients if r.enabled
        ]
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    if not recipients:
        print(f"model {model.model_name}: no enabled recipient; add one to {file}")
        return 0
    if args.window:
        windows = {r.id: [args.window] for r in recipients}
        mode = MANUAL
    elif args.backfill:
        windows = {r.id: recipient_windows(model, r) for r in recipients}
        mode = BACKFILL
    else:
        tick = scheduled_windows(model)
        windows = {r.id: tick for r in recipients}
        mode = INCREMENTAL
    windows = {rid: keys for rid, keys in windows.items() if keys}
    if not windows:
        print(f"model {model.model_name}: no window has started yet (min_start_time_epoch is in the future)")
        return 0
    defs, instance = resident(file) if resident else (build_definitions(file), dagster_instance(file))
    specs = plan_runs(
        config, model, recipients, windows={rid: (keys[0], keys[-1]) for rid, keys in windows.items()},
        registered=register(instance, list(windows)), mode=mode, full_refresh=args.full_refresh,
        user_tags=user_run_tags(parse_tags(args.tag or [])),
    )
    n_windows = sum(len(k) for k in windows.values())
    first = min(k[0] for k in windows.values())
    last = max(k[-1] for k in windows.values())
    who = recipients[0].id if len(windows) == 1 else f"{len(windows)} recipients"
    runs = f" in {len(specs)} runs" if len(specs) > 1 else ""
    print(f"transfer {model.model_name} → {who}: {n_windows} window(s) {first} .. {last}{runs}", flush=True)
    results = execute_runs(defs, instance, specs, windows=windows, progress=lambda line: print(line, flush=True))
    failed = [r for r in results if not r.success]
    for result in failed:
        print(f"error: {result.error or 'transfer failed; see run ' + result.run_id + ' in the Dagster UI'}", file=sys.stderr)
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
    }


def run_transfer_request(transfer: dict[str, object], *, config: str, resident: Resident) -> int:
    """Run a worker's transfer request as ``incsync transfer`` would (same output, same exit status)."""
    args = argparse.Namespace(
        model=transfer["model"], recipient=transfer["recipients"] or None, window=transfer["window"],
        backfill=transfer["backfill"], full_refresh=transfer["full_refresh"], tag=transfer["tags"] or None,
        worker=None, config=config, func=cmd_transfer,
    )
    return _run(args, resident=resident)


def cmd_janitor(args: argparse.Namespace) -> int:
    from incsync.config import ObjectStorageDestinationConfig
    from incsync.destinations.object_storage import janitor

    file = config_path(args.config)
    config = load_config(file)
    targets = [d for d in config.destinations if isinstance(d, ObjectStorageDestinationConfig)]
    if args.destination:
        targets = [d for d in targets if d.name == args.destination]
        if not targets:
            known = ", ".join(d.name for d in config.destinations if isinstance(d, ObjectStorageDestinationConfig))
            raise ConfigError(str(file), [f'--destination: "{args.destination}" is not an object_storage destination; known: [{known}]'])
    verb = "would remove" if args.dry_run else "removed"
    for destination in targets:
        removed = janitor(destination.path, grace_seconds=args.grace_seconds, dry_run=args.dry_run)
        for path in removed:
            print(f"{verb} {path}")
        print(f"{destination.name}: {verb} {len(removed)} unmanifested file(s) older than {args.grace_seconds:g} s")
    return 0


def cmd_transfers(args: argparse.Namespace) -> int:
    from incsync.automation.statuses import counts_by_model, list_transfers
    from incsync.automation.tags import parse_tags
    from incsync.runner import dagster_instance

    file = config_path(args.config)
    config = load_config(file)
    transfers = list_transfers(
        dagster_instance(file), config, recipient=args.recipient, status=args.status,
        tags=parse_tags(args.tag or []), limit=args.limit,
    )
    print(f"{'created (UTC)':<20} {'status':<16} {'model(s)':<16} {'recipient(s)':<20} {'windows':>7} "
          f"{'rows':>9} {'delta':>9}  {'owner(s)':<20} tags / run")
    for t in transfers:
        tags = ",".join(f"{k}={v}" for k, v in sorted(t.tags.items()))
        print(f"{t.created_at:%Y-%m-%d %H:%M:%S}  {t.status.value:<16} {','.join(t.models):<16} "
              f"{','.join(t.recipients):<20} {t.partitions_committed:>7} {t.rows_transferred:>9} "
              f"{t.delta_rows_transferred:>9}  {','.join(t.owners) or '-':<20} {tags + ' ' if tags else ''}{t.run_id[:8]}")
    for model, counts in sorted(counts_by_model(transfers).items()):
        print(f"{model}: " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items())))
    return 0


def cmd_dagster_yaml(args: argparse.Namespace) -> int:
    from incsync.automation.concurrency import dagster_yaml

    home = Path(args.output).parent if args.output else (Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else None)
    text = dagster_yaml(load_config(args.config), Path(args.base) if args.base else None, dagster_home=home)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from incsync.demo import run_demo

    return run_demo(Path(args.workdir), rows=args.rows)


def cmd_worker(args: argparse.Namespace) -> int:
    from incsync.worker import default_socket, serve

    file = config_path(args.config)
    socket_path = Path(args.socket) if args.socket else default_socket(file)
    print(f"starting an incsync worker for {file.resolve()} on {socket_path} ...", flush=True)
    serve(file, socket_path, warm=not args.no_warm, announce=lambda text: print(text, flush=True))
    return 0


def cmd_spark_server(args: argparse.Namespace) -> int:
    import signal

    from incsync.spark_server import remote_url, start_server, stop_server

    print(f"starting a Spark Connect server ({args.master}) on 127.0.0.1:{args.port} ...", flush=True)
    process = start_server(port=args.port, master=args.master, log_file=Path(args.log) if args.log else None)
    print(f"ready: add to incsync.yaml\n  spark:\n    spark.remote: \"{remote_url(args.port)}\"\nCtrl-C stops it.", flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="incsync", description="Incremental per-recipient data transfer on Dagster.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check the configuration file")
    p.add_argument("-c", "--config", help="config file (default $INCSYNC_CONFIG or incsync.yaml)")
    p.add_argument("--connect", action="store_true", help="also reach every source and destination")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("transfer", help="materialize a model for its recipients through Dagster")
    p.add_argument("model")
    p.add_argument("--recipient", action="append",
                   help="a recipient id (repeatable; default: every enabled recipient)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--window", help="one window partition key, e.g. 2024-03-01")
    group.add_argument("--backfill", action="store_true", help="every window from the recipient's start")
    p.add_argument("--full-refresh", action="store_true", help="reload the recipient's model from its start")
    p.add_argument("--tag", action="append", help="run tag key=value (repeatable)")
    p.add_argument("--worker", metavar="SOCKET",
                   help="hand the transfer to the `incsync worker` at SOCKET (default $INCSYNC_WORKER; unset: run here)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_transfer)

    p = sub.add_parser("worker", help="keep Dagster and Spark loaded; `transfer --worker` hands it transfers")
    p.add_argument("-c", "--config")
    p.add_argument("--socket", help="Unix socket to listen on (default .incsync-worker.sock beside the config file)")
    p.add_argument("--no-warm", action="store_true", help="do not start Spark before the first request")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("janitor", help="remove object-storage files no manifest lists, once older than a grace period")
    p.add_argument("--destination", help="one object_storage destination (default: every one)")
    p.add_argument("--grace-seconds", type=float, default=6 * 3600,
                   help="keep younger files: they may belong to a transfer still publishing (default 21600)")
    p.add_argument("--dry-run", action="store_true", help="list the files, remove nothing")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_janitor)

    p = sub.add_parser("transfers", help="list transfers with their status and counts")
    p.add_argument("--recipient")
    p.add_argument("--status", help="PENDING, RUNNING, SUCCESS, ERROR, PARTIAL_FAILURE, CANCELLED, KILLED, EXPIRED, ORPHANED")
    p.add_argument("--tag", action="append", help="key=value (repeatable)")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_transfers)

    p = sub.add_parser("dagster-yaml", help="dagster.yaml with run concurrency limits from the config's max_concurrent_transfers")
    p.add_argument("-c", "--config")
    p.add_argument("--base", help="dagster.yaml to start from (default: none)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.set_defaults(func=cmd_dagster_yaml)

    p = sub.add_parser("spark-server", help="run a local Spark Connect server that keeps Spark warm across runs")
    p.add_argument("--port", type=int, default=15002)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--log", help="file for the server's output")
    p.set_defaults(func=cmd_spark_server)

    p = sub.add_parser("demo", help="build a sample source and transfer it to a few recipients")
    p.add_argument("--workdir", default="demo")
    p.add_argument("--rows", type=int, default=120_000)
    p.set_defaults(func=cmd_demo)
    from incsync.handover import add_parser as add_transfer_ownership

    add_transfer_ownership(sub)
    return parser


def run_command(argv: list[str], *, resident: Resident | None = None) -> int:
    """Run one command line; ``resident`` (from a worker) supplies loaded definitions and instance."""
    return _run(build_parser().parse_args(argv), resident=resident)


def _run(args: argparse.Namespace, *, resident: Resident | None) -> int:
    args.resident = resident
    try:
        return args.func(args)
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except IncsyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())

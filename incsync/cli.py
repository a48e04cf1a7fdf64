"""The `incsync` command: validate, demo, transfer — the same Dagster definitions the UI uses."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

# Standard library, incsync.errors and incsync.paths only at import time: `incsync transfer --worker` stays a thin client.
from incsync.errors import ConfigError, IncsyncError, InputError
from incsync.paths import config_path

if TYPE_CHECKING:
    import dagster as dg

Resident = Callable[[Path], "tuple[dg.Definitions, dg.DagsterInstance]"]


def load_config(path: str | None):  # noqa: ANN201 - IncsyncConfig, imported lazily with pydantic
    from incsync.config_load import load_config as load

    return load(path)


def cmd_validate(args: argparse.Namespace) -> int:
    from incsync.cli_output import fix_separator
    from incsync.config_lines import problem_lines
    from incsync.locations import location_notes
    from incsync.validate_checks import lake_schema_problems, unset_variables

    file = config_path(args.config)
    config = load_config(file)
    summary = (f"{len(config.sources)} sources, {len(config.destinations)} destinations, "
               f"{len(config.models)} models, {len(config.recipients)} recipients")
    text = file.read_text()
    notes = [f"note: {note}" for note in location_notes(config, Path.cwd())]
    problems: list[str] = []
    drift: list[str] = []
    warnings: list[str] = []
    if args.connect:
        from incsync.connectivity import check_connectivity

        problems = check_connectivity(config)
        if not problems:
            from incsync.connectivity import check_drift  # schema drift: informational lines, never a failure

            drift = check_drift(config)
    else:
        # Without --connect: what the files on this machine already tell (no Spark, no database).
        schema_problems, warnings = lake_schema_problems(config)
        if schema_problems:
            raise ConfigError(str(file), schema_problems, problem_lines(text, schema_problems))
        warnings += unset_variables(config)
    located = ConfigError(str(file), [fix_separator(p) for p in problems], problem_lines(text, problems)).located()
    warned = ConfigError(str(file), [fix_separator(w) for w in warnings], problem_lines(text, warnings)).located()
    if getattr(args, "json", False):
        from incsync.cli_output import print_json

        print_json({"file": str(file), "ok": not problems, "summary": summary, "notes": notes,
                    "problems": located, "warnings": warned, "drift": drift})
        return 1 if problems else 0
    for line in warned:
        print(f"warning: {line}", file=sys.stderr)
    if problems:
        for line in located:
            print(f"error: {line}", file=sys.stderr)
        return 1
    print(f"{file}: OK ({summary})")
    for note in notes:
        print(note)
    if args.connect:
        print("every source and destination answered")
        for line in drift:
            print(f"  {line}")
    return 0


def cmd_transfer(args: argparse.Namespace) -> int:
    from incsync.worker_client import WORKER_ENV_VAR, forward  # standard library only

    resident: Resident | None = args.resident
    dry_run, as_json = getattr(args, "dry_run", False), getattr(args, "json", False)
    ranged = getattr(args, "from_", None) or getattr(args, "to", None)
    # --allow-mass-delete runs here (its help says so): the worker's request does not carry it.
    here = resident or dry_run or getattr(args, "allow_mass_delete", False)
    worker = None if here else (args.worker or os.environ.get(WORKER_ENV_VAR))
    if worker:
        return forward(worker, transfer=transfer_request(args), config=args.config)

    from incsync.tags import BACKFILL, INCREMENTAL, parse_tags, user_run_tags
    from incsync.cli_windows import backfill_windows, window_key
    from incsync.runner import MANUAL, recipient_windows, scheduled_windows

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
        windows = {r.id: backfill_windows(model, recipient_windows(model, r), getattr(args, "from_", None),
                                          getattr(args, "to", None)) for r in recipients}
        mode = BACKFILL
    else:
        tick = scheduled_windows(model)
        windows = {r.id: tick for r in recipients}
        mode = INCREMENTAL
    windows = {rid: keys for rid, keys in windows.items() if keys}
    if not windows:
        why = "no window in --from/--to" if ranged else "no window has started yet (min_start_time_epoch is in the future)"
        if as_json:
            from incsync.cli_output import print_json

            print_json({"model": model.model_name, "mode": mode, "runs": [], "note": why})
        else:
            print(f"model {model.model_name}: {why}")
        return 0
    if dry_run:
        return _dry_run(config, model, [r for r in recipients if r.id in windows], windows, mode=mode,
                        full_refresh=args.full_refresh, as_json=as_json)
    return _execute(args, file, config, model, recipients, windows, mode=mode, user_tags=user_tags, as_json=as_json)


def _dry_run(config, model, recipients, windows, *, mode: str, full_refresh: bool, as_json: bool) -> int:  # noqa: ANN001
    from incsync.tags import INCREMENTAL
    from incsync.cli_output import print_json
    from incsync.dry_run import plan_lines, plan_transfer

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
    from incsync import progress as progress_events
    from incsync.cli_output import Progress, print_json
    from incsync.launch import plan_runs, register
    from incsync.project import build_definitions
    from incsync.runner import dagster_instance, execute_runs
    from incsync.tags import ALLOW_MASS_DELETE_TAG

    resident: Resident | None = args.resident
    defs, instance = resident(file) if resident else (build_definitions(file), dagster_instance(file))
    from incsync.automation.liveness import reap
    from incsync.resources import default_staging_dir

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


def run_transfer_request(transfer: dict[str, object], *, config: str, resident: Resident) -> int:
    """Run a worker's transfer request as ``incsync transfer`` would (same output, same exit status)."""
    args = argparse.Namespace(
        model=transfer["model"], recipient=transfer["recipients"] or None, window=transfer["window"],
        backfill=transfer["backfill"], full_refresh=transfer["full_refresh"], tag=transfer["tags"] or None,
        worker=None, config=config, func=cmd_transfer, json=transfer["json"], dry_run=False, from_=transfer["from"],
        to=transfer["to"], debug=False,
    )
    return _run(args, resident=resident)


def cmd_janitor(args: argparse.Namespace) -> int:
    from incsync.config import ObjectStorageDestinationConfig
    from incsync.destinations.janitor import janitor

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
        removed = janitor(destination.path, grace_seconds=args.grace_seconds, dry_run=args.dry_run,
                          storage_options=destination.storage_options)
        for path in removed:
            print(f"{verb} {path}")
        print(f"{destination.name}: {verb} {len(removed)} unmanifested file(s) older than {args.grace_seconds:g} s")
    return 0


def cmd_transfers(args: argparse.Namespace) -> int:
    from incsync.automation.statuses import counts_by_model, list_transfers
    from incsync.tags import parse_tags
    from incsync.cli_output import print_json, transfers_lines
    from incsync.runner import dagster_instance

    from incsync.automation.liveness import reap
    from incsync.resources import default_staging_dir

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
    from incsync.worker import serve
    from incsync.worker_client import default_socket

    file = config_path(args.config)
    socket_path = Path(args.socket) if args.socket else default_socket(file)
    print(f"starting an incsync worker for {file.resolve()} on {socket_path} ...", flush=True)
    serve(file, socket_path, run=run_transfer_request, warm=not args.no_warm, announce=lambda text: print(text, flush=True))
    return 0


def cmd_spark_server(args: argparse.Namespace) -> int:
    import signal

    from incsync.spark_server import remote_url, start_server, stop_server

    print(f"starting a Spark Connect server ({args.master}) on 127.0.0.1:{args.port} ...", flush=True)
    driver = {"spark.driver.host": args.driver_host, "spark.driver.bindAddress": args.bind_address}
    process = start_server(port=args.port, master=args.master, log_file=Path(args.log) if args.log else None,
                           extra_conf={k: v for k, v in driver.items() if v})
    print(f"ready: add to incsync.yaml\n  spark:\n    spark.remote: \"{remote_url(args.port)}\"\nCtrl-C stops it.", flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process)
    return 0


class UsageError(InputError):
    """The command line itself is wrong (an unknown command or option, a missing argument)."""


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line naming the fix (exit status 2), not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        import difflib
        import re

        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice and self._commands() and choice.group(2) not in self._commands() and "'validate'" in choice.group(3):
            typed = choice.group(2)
            close = difflib.get_close_matches(typed, self._commands(), n=1)
            hint = f'did you mean "{close[0]}"?' if close else f"one of: {', '.join(self._commands())}"
            raise UsageError(f'"{typed}" is not an incsync command — {hint} (`incsync --help` lists them)')
        raise UsageError(f"{self.prog}: {message} — see `{self.prog} --help`")

    def _commands(self) -> list[str]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return list(action.choices)
        return []


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("incsync")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout without installing
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="incsync", description="Incremental per-recipient data transfer on Dagster.",
                     epilog="Add --debug anywhere to see tracebacks. Docs: README.md and docs/config.md.")
    parser.add_argument("--version", action="version", version=f"incsync {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and Dagster's and Spark's output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check the configuration file")
    p.add_argument("-c", "--config", help="config file (default $INCSYNC_CONFIG or incsync.yaml)")
    p.add_argument("--connect", action="store_true", help="also reach every source and destination")
    p.add_argument("--json", action="store_true", help="one JSON object on standard output")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("transfer", help="materialize a model for its recipients through Dagster")
    p.add_argument("model")
    p.add_argument("--recipient", action="append",
                   help="a recipient id (repeatable; default: every enabled recipient)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--window", help="one window partition key, e.g. 2024-03-01")
    group.add_argument("--backfill", action="store_true", help="every window from the recipient's start")
    p.add_argument("--from", dest="from_", metavar="WHEN",
                   help="backfill from the window holding WHEN (a window key or ISO date/time)")
    p.add_argument("--to", metavar="WHEN", help="backfill up to the window holding WHEN, inclusive")
    p.add_argument("--full-refresh", action="store_true", help="reload the recipient's model from its start")
    p.add_argument("--allow-mass-delete", action="store_true",
                   help="deletes: remove orphaned rows even past the model's max_delete_fraction (run here, not via --worker)")
    p.add_argument("--tag", action="append", help="run tag key=value (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (recipients, windows, bounds, estimated rows) and write nothing")
    p.add_argument("--json", action="store_true", help="one JSON object on standard output instead of lines")
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

    p = sub.add_parser("transfers", help="list transfers with their status, mode, counts, duration and error")
    p.add_argument("--recipient")
    p.add_argument("--status", help="PENDING, RUNNING, SUCCESS, ERROR, PARTIAL_FAILURE, CANCELLED, KILLED, EXPIRED, ORPHANED")
    p.add_argument("--tag", action="append", help="key=value (repeatable)")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--json", action="store_true", help="one JSON array on standard output")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_transfers)

    p = sub.add_parser("dagster-yaml", help="dagster.yaml with run concurrency limits from the config's max_concurrent_transfers")
    p.add_argument("-c", "--config")
    p.add_argument("--base", help="dagster.yaml to start from (default: none)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.set_defaults(func=cmd_dagster_yaml)

    p = sub.add_parser("spark-server", help="run a local Spark Connect server that keeps Spark warm across runs")
    p.add_argument("--port", type=int, default=15002)
    p.add_argument("--master", default="local[*]", help="local[*], or a cluster such as spark://host:7077")
    p.add_argument("--driver-host", help="address the cluster's executors reach this driver at (default: loopback "
                   "for a local master, this host's name otherwise)")
    p.add_argument("--bind-address", help="address the driver listens on (e.g. 0.0.0.0 for a cluster)")
    p.add_argument("--log", help="file for the server's output")
    p.set_defaults(func=cmd_spark_server)

    p = sub.add_parser("demo", help="build a sample source and transfer it to a few recipients")
    p.add_argument("--workdir", default="demo")
    p.add_argument("--rows", type=int, default=120_000)
    p.set_defaults(func=cmd_demo)
    # Subcommands defined in their own modules, each with add_parser(sub).
    from incsync.handover import add_parser as add_transfer_ownership
    from incsync.init_cmd import add_parser as add_init
    from incsync.state_cmd import add_parser as add_state

    add_transfer_ownership(sub)
    from incsync.integrity.commands import add_parsers as add_integrity

    add_integrity(sub)
    add_state(sub)
    add_init(sub)
    return parser


# Commands whose Dagster and Spark output goes to a log file (see cli_output.Chatter).
QUIET_COMMANDS = {"transfer", "transfers", "state", "validate", "demo", "transfer-ownership", "verify", "repair"}


def run_command(argv: list[str], *, resident: Resident | None = None) -> int:
    """Run one command line; ``resident`` (from a worker) supplies loaded definitions and instance."""
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]  # accepted anywhere on the line
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.debug = debug
    return _run(args, resident=resident)


def _run(args: argparse.Namespace, *, resident: Resident | None) -> int:
    from incsync.cli_output import Chatter, config_problem_lines, log_dir

    args.resident = resident
    debug = getattr(args, "debug", False)
    chatter = None
    quiet = getattr(args, "command", None) in QUIET_COMMANDS and not (args.command == "validate" and not args.connect)
    if resident is None and not debug and quiet:
        chatter = Chatter(log_dir(config_path(getattr(args, "config", None))), args.command)
    code = 1
    try:
        with chatter or contextlib.nullcontext():
            try:
                code = args.func(args)
            except ConfigError as exc:
                for line in config_problem_lines(exc):
                    print(f"error: {line}", file=sys.stderr)
                code = 2
            except InputError as exc:
                print(f"error: {exc}", file=sys.stderr)
                code = 2
            except IncsyncError as exc:
                print(f"error: {exc}", file=sys.stderr)
                code = 1
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                code = 130
            except Exception as exc:  # noqa: BLE001 - an unexpected error: one line, the traceback with --debug
                if debug or resident is not None:
                    raise
                import logging

                logging.getLogger("incsync.cli").debug("unexpected error", exc_info=True)  # to the log file
                first = (str(exc).strip().splitlines() or [""])[0]
                print(f"error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)", file=sys.stderr)
                code = 1
    except OSError as exc:  # the log folder itself could not be created
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if code and chatter is not None and chatter.has_output:
        print(f"Dagster's and Spark's output: {chatter.path}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())

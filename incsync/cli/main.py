"""The `incsync` command: its parser and entry point, and the worker that runs its transfers resident.
The commands themselves live in the other modules of ``incsync.cli``, one per command family."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

# Standard library, incsync.errors, incsync.paths and the command modules (which import the same) only at
# import time: `incsync transfer --worker` stays a thin client.
from incsync.cli.errors import UsageError
from incsync.cli.operations import (
    cmd_audit,
    cmd_dagster_yaml,
    cmd_demo,
    cmd_expand_events,
    cmd_janitor,
    cmd_maintain,
    cmd_spark_server,
    demo_acme_kinds,
)
from incsync.cli.parsing import LazyChoices, Parser
from incsync.cli.transfer import cmd_transfer, cmd_transfers, run_transfer
from incsync.cli.validate import cmd_validate
from incsync.core.blame import PARTIES
from incsync.errors import IncsyncError
from incsync.paths import config_path
from incsync.worker.command import Resident, TransferCommand


def run_transfer_request(command: TransferCommand, *, config: str, resident: Resident) -> int:
    """Run a worker's transfer command as ``incsync transfer`` would (same output, same exit status)."""
    return run_guarded(lambda: run_transfer(command, config=config, resident=resident), command="transfer",
                       config=config, resident=resident)


def cmd_worker(args: argparse.Namespace) -> int:
    from incsync.worker.client import default_socket
    from incsync.worker.server import serve

    file = config_path(args.config)
    socket_path = Path(args.socket) if args.socket else default_socket(file)
    idle = args.idle_exit
    if args.auto:  # started by `incsync transfer` (incsync.worker.auto): idles out as its config says
        from incsync.config.load import load_config

        idle = load_config(file).worker.idle_exit_seconds
    print(f"starting an incsync worker for {file.resolve()} on {socket_path} ...", flush=True)
    serve(file, socket_path, run=run_transfer_request, warm=not args.no_warm, announce=lambda text: print(text, flush=True),
          idle_exit_seconds=idle)
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("incsync")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout without installing
        return "unknown"


def build_parser() -> Parser:
    parser = Parser(prog="incsync", description="Incremental per-recipient data transfer on Dagster.",
                    epilog="Add --debug anywhere to see tracebacks. Docs: README.md and docs/config.md.")
    parser.add_argument("--version", action="version", version=f"incsync {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and Dagster's and Spark's output")
    sub = parser.add_commands(dest="command", required=True, metavar="COMMAND")

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
    p.add_argument("--verbose", action="store_true",
                   help="a line per window partition (default: a line per recipient, with its windows' totals)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--worker", metavar="SOCKET",
                       help="hand the transfer to the `incsync worker` at SOCKET (default $INCSYNC_WORKER; unset: to the "
                       "worker this command starts on first use and reuses until it idles)")
    where.add_argument("--no-worker", action="store_true",
                       help="run the transfer in this process, not in a worker (also INCSYNC_AUTO_WORKER=0, or "
                       "`worker: {auto_start: false}` in the config)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_transfer)

    p = sub.add_parser("worker", help="keep Dagster and Spark loaded; `transfer --worker` hands it transfers")
    p.add_argument("-c", "--config")
    p.add_argument("--socket", help="Unix socket to listen on (default .incsync-worker.sock beside the config file)")
    p.add_argument("--no-warm", action="store_true", help="do not start Spark before the first request")
    p.add_argument("--idle-exit", type=float, metavar="SECONDS", help="exit after SECONDS without a transfer (default: never)")
    p.add_argument("--auto", action="store_true", help=argparse.SUPPRESS)  # started by `incsync transfer`
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("janitor", help="remove object-storage files no manifest lists, once older than a grace period")
    p.add_argument("--destination", help="one object_storage destination (default: every one)")
    p.add_argument("--grace-seconds", type=float, default=6 * 3600,
                   help="keep younger files: they may belong to a transfer still publishing (default 21600)")
    p.add_argument("--dry-run", action="store_true", help="list the files, remove nothing")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_janitor)

    p = sub.add_parser("maintain", help="compact and vacuum the destinations' tables (what the maintenance schedule runs)")
    p.add_argument("--destination", help="one destination (default: every one)")
    p.add_argument("--model", help="one model's tables (default: every model's)")
    p.add_argument("--dry-run", action="store_true", help="say what would be compacted and vacuumed, change nothing")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("audit", help="append the transfer log to the `audit:` destination once (what its schedule runs)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("transfers", help="list transfers with their status, mode, counts, duration and error")
    p.add_argument("--recipient")
    p.add_argument("--status", help="PENDING, RUNNING, SUCCESS, ERROR, PARTIAL_FAILURE, CANCELLED, KILLED, EXPIRED, ORPHANED")
    p.add_argument("--tag", action="append", help="key=value (repeatable)")
    p.add_argument("--blamed", choices=PARTIES, help="only failed transfers blamed on this party")
    p.add_argument("--product", help="only runs of the product's models for recipients subscribed to it")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--json", action="store_true", help="one JSON array on standard output")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_transfers)

    p = sub.add_parser("dagster-yaml", help="dagster.yaml with run concurrency limits from the config's max_concurrent_transfers")
    p.add_argument("-c", "--config")
    p.add_argument("--base", help="dagster.yaml to start from (default: none)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.set_defaults(func=cmd_dagster_yaml)

    p = sub.add_parser("expand-events", help="rewrite the event log's compact rows as JSON (before leaving incsync's event log)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_expand_events)

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
    p.add_argument("--acme-destination", choices=LazyChoices(demo_acme_kinds), metavar="KIND", default="delta",
                   help="the kind of acme's destination: %(choices)s (globex: PostgreSQL, initech: object storage)")
    p.add_argument("--mariadb", action="store_true",
                   help="also transfer to a fourth recipient's MariaDB database on 127.0.0.1:3306 (as root)")
    p.set_defaults(func=cmd_demo)
    # Subcommands defined in their own modules, each with add_parser(sub).
    from incsync.cli.handover import add_parser as add_transfer_ownership
    from incsync.cli.init import add_parser as add_init
    from incsync.cli.state import add_parser as add_state

    add_transfer_ownership(sub)
    from incsync.cli.integrity import add_parsers as add_integrity

    add_integrity(sub)
    from incsync.cli.share import add_parsers as add_sharing

    add_sharing(sub)
    from incsync.cli.secrets import add_parsers as add_secrets

    add_secrets(sub)
    from incsync.cli.onboard import add_parsers as add_onboard

    add_onboard(sub)
    add_state(sub)
    add_init(sub)
    return parser


# Commands whose Dagster and Spark output goes to a log file (see cli_output.Chatter).
QUIET_COMMANDS = {"transfer", "transfers", "state", "validate", "demo", "transfer-ownership", "verify", "repair", "maintain", "audit"}


def run_command(argv: list[str], *, resident: Resident | None = None) -> int:
    """Run one command line; ``resident`` (from a worker) supplies loaded definitions and instance."""
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]  # accepted anywhere on the line
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return _say(exc)
    args.resident = resident
    quiet = args.command in QUIET_COMMANDS and not (args.command == "validate" and not args.connect)
    return run_guarded(lambda: args.func(args), command=args.command, config=getattr(args, "config", None),
                       debug=debug, quiet=quiet, resident=resident)


def run_guarded(action: Callable[[], int], *, command: str, config: str | None, debug: bool = False, quiet: bool = False,
                resident: Resident | None = None) -> int:
    """``action()``'s exit status, every error said in one line (``--debug``: with its traceback); ``quiet``: Dagster's
    and Spark's output to a log file. A worker's requests (``resident``) raise what incsync did not mean to."""
    from incsync.cli.output import Chatter, log_dir

    chatter = None
    if resident is None and not debug and quiet:
        chatter = Chatter(log_dir(config_path(config)), command)
    code = 1
    try:
        with chatter or contextlib.nullcontext():
            try:
                code = action()
            except IncsyncError as exc:
                code = _say(exc)
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                code = 130
            except Exception as exc:
                if debug or resident is not None:
                    raise
                import logging

                logging.getLogger("incsync.cli.main").debug("unexpected error", exc_info=True)  # to the log file
                first = (str(exc).strip().splitlines() or [""])[0]
                print(f"error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)", file=sys.stderr)
                code = 1
    except OSError as exc:  # the log folder itself could not be created
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if code and chatter is not None and chatter.has_output:
        print(f"Dagster's and Spark's output: {chatter.path}", file=sys.stderr)
    return code


def _say(exc: IncsyncError) -> int:
    """Print ``exc`` as the command line says errors; its exit status."""
    from incsync.cli.output import error_lines

    lines, code = error_lines(exc)
    for line in lines:
        print(line, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())

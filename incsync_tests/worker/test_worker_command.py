"""`incsync transfer`'s typed command: parsed once from the command line, the same value after a trip
through the worker protocol, and the flags that run here never sent."""

from __future__ import annotations

import json

import pytest

from incsync.cli.main import build_parser
from incsync.cli.transfer import transfer_command
from incsync.worker.command import TransferCommand
from incsync.worker.errors import WorkerError


def test_the_command_line_is_parsed_once_into_a_command() -> None:
    args = build_parser().parse_args(
        ["transfer", "orders", "--recipient", "acme", "--recipient", "globex", "--from", "2024-01-01", "--tag", "a=b",
         "--full-refresh", "--json"]
    )
    assert transfer_command(args) == TransferCommand(
        model="orders", recipients=("acme", "globex"), from_="2024-01-01", tags=("a=b",), full_refresh=True, json=True,
    )


def test_a_command_is_the_same_after_the_wire() -> None:
    command = TransferCommand(model="orders", recipients=("acme",), window="2024-03-01", tags=("tier=gold",))
    assert TransferCommand.from_wire(json.loads(json.dumps(command.wire()))) == command


@pytest.mark.parametrize("flag", ["--dry-run", "--allow-mass-delete"])
def test_what_runs_here_is_never_sent(flag: str) -> None:
    command = transfer_command(build_parser().parse_args(["transfer", "orders", flag]))
    assert command.runs_here
    assert set(command.wire()) == {"model", "recipients", "window", "backfill", "full_refresh", "tags", "from", "to", "json", "verbose"}


def test_a_mistyped_wire_object_is_refused_naming_the_field() -> None:
    with pytest.raises(WorkerError, match=r"^transfer request field 'window' has the wrong type \(int\)$"):
        TransferCommand.from_wire({**TransferCommand(model="orders").wire(), "window": 3})

"""The worker's request: versioned, typed fields (never argv), each checked before anything runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from incsync.cli.main import build_parser, run_transfer_request
from incsync.cli.transfer import transfer_request
from incsync.paths import dagster_home
from incsync.worker.client import PROTOCOL_VERSION
from incsync.worker.server import Worker


@pytest.fixture
def worker(tmp_path: Path) -> Worker:
    config = tmp_path / "incsync.yaml"
    config.write_text("{}\n")
    return Worker(config, run=run_transfer_request)


def _request(worker: Worker, **transfer: object) -> dict[str, object]:
    args: argparse.Namespace = build_parser().parse_args(
        ["transfer", "orders", "--recipient", "acme", "--recipient", "globex", "--backfill", "--tag", "ticket=INC-1"]
    )
    return {
        "version": PROTOCOL_VERSION, "config": str(worker.config_file), "dagster_home": str(dagster_home(worker.config_file).resolve()),
        "transfer": {**transfer_request(args), **transfer},
    }


def test_the_cli_sends_what_it_was_asked_as_typed_fields(worker: Worker) -> None:
    request = _request(worker)
    assert request["transfer"] == {
        "model": "orders", "recipients": ["acme", "globex"], "window": None, "backfill": True, "full_refresh": False,
        "tags": ["ticket=INC-1"], "from": None, "to": None, "json": False, "verbose": False,
    }
    assert worker.refusal(request) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"recipients": "acme"}, "transfer request field 'recipients' has the wrong type (str)"),
        ({"backfill": "yes"}, "transfer request field 'backfill' has the wrong type (str)"),
        ({"tags": [1]}, "transfer request field 'tags' has the wrong type (list)"),
        ({"json": "yes"}, "transfer request field 'json' has the wrong type (str)"),
        ({"from": 20240101}, "transfer request field 'from' has the wrong type (int)"),
        ({"argv": ["transfer"]}, "the worker runs transfer requests with the fields model, recipients, window, backfill, "
                                 "full_refresh, tags, from, to, json, verbose"),
    ],
    ids=["list-as-text", "bool-as-text", "tag-not-text", "json-as-text", "from-as-number", "unknown-field"],
)
def test_a_mistyped_request_is_refused_naming_the_field(worker: Worker, change: dict[str, object], message: str) -> None:
    assert worker.refusal(_request(worker, **change)) == message


def test_json_and_a_range_are_sent_to_the_worker_not_run_here() -> None:
    args = build_parser().parse_args(["transfer", "orders", "--from", "2024-01-01", "--to", "2024-01-05", "--json"])
    assert {k: v for k, v in transfer_request(args).items() if k in ("from", "to", "json", "backfill")} == {
        "from": "2024-01-01", "to": "2024-01-05", "json": True, "backfill": False,
    }


def test_an_old_client_is_told_to_use_one_install(worker: Worker) -> None:
    assert worker.refusal({**_request(worker), "version": 2}) == (
        f"the worker speaks protocol {PROTOCOL_VERSION}, the client 2; use one incsync install"
    )

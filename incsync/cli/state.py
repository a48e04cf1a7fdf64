"""`incsync state MODEL [--recipient R]`: each recipient's high watermark, last transfer and model
fingerprint, read from its destination's transfer log (the only place incsync keeps them)."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from incsync.cli.parsing import Commands
from incsync.errors import ConfigError

if TYPE_CHECKING:
    from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig

MAX_PARALLEL = 8


def recipient_states(config: IncsyncConfig, model: ModelConfig, recipients: list[RecipientConfig]) -> list[dict[str, object]]:
    from incsync.core.fingerprint import model_fingerprint
    from incsync.destinations.registry import build_destination

    current = model_fingerprint(model)

    def one(recipient: RecipientConfig) -> dict[str, object]:
        destination = build_destination(config.destination(recipient.destination))
        state = destination.read_state(model=model, recipient=recipient)
        last = state.last_transfer
        hw = state.high_watermark
        return {
            "model": model.model_name,
            "recipient": recipient.id,
            "destination": destination.name,
            "high_watermark": None if hw is None else hw.isoformat(),
            "last_transfer": None if last is None else {
                "transfer_id": last.transfer_id, "transfer_type": last.transfer_type,
                "committed_at": last.committed_at, "window_start": last.window_start, "window_end": last.window_end,
                "rows_transferred": last.rows_transferred, "delta_rows_transferred": last.delta_rows_transferred,
            },
            "fingerprint": None if last is None else last.fingerprint,
            "current_fingerprint": current,
            "fingerprint_matches": None if last is None else last.fingerprint == current,
            "reset_reason": state.reset_reason,
        }

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(recipients)))) as pool:
        return list(pool.map(one, recipients))


def state_lines(states: list[dict[str, object]]) -> list[str]:
    lines = [f"{'recipient':<16} {'destination':<16} {'high watermark (UTC)':<33} {'last transfer':<14} "
             f"{'committed (UTC)':<21} {'rows':>9}  fingerprint"]
    for s in states:
        last = s["last_transfer"]
        hw = s["high_watermark"] or "-"
        if last is None:
            kind, committed, rows = "never", "-", "-"
        else:
            kind, committed, rows = last["transfer_type"], last["committed_at"], str(last["rows_transferred"])  # type: ignore[index]  # a transfer's JSON record
        if s["fingerprint"] is None:
            fp = f"- (current {s['current_fingerprint']})"
        elif s["fingerprint_matches"]:
            fp = f"{s['fingerprint']} (current)"
        else:
            fp = f"{s['fingerprint']} (model changed to {s['current_fingerprint']}: the next transfer is a full refresh)"
        lines.append(f"{s['recipient']:<16} {s['destination']:<16} {hw:<33} {kind:<14} {committed:<21} {rows:>9}  {fp}")
        if s["reset_reason"]:
            lines.append(f"  {s['recipient']}: the next transfer re-syncs from the start: {s['reset_reason']}")
    return lines


def cmd_state(args: argparse.Namespace) -> int:
    from incsync.cli.output import print_json
    from incsync.config.load import load_config
    from incsync.paths import config_path

    file = config_path(args.config)
    config = load_config(file)
    try:
        model = config.model(args.model)
        recipients = [config.recipient(r) for r in dict.fromkeys(args.recipient)] if args.recipient else list(config.recipients)
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    states = recipient_states(config, model, recipients)
    if args.json:
        print_json(states)
    else:
        for line in state_lines(states):
            print(line)
    return 0


def add_parser(sub: Commands) -> None:
    p = sub.add_parser("state", help="each recipient's high watermark, last transfer and fingerprint (from its destination)")
    p.add_argument("model")
    p.add_argument("--recipient", action="append", help="a recipient id (repeatable; default: every recipient)")
    p.add_argument("--json", action="store_true", help="one JSON array on standard output")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_state)

"""`incsync transfer-ownership`: move a destination's copy of a model to another recipient, explicitly.

The owner stamp (see ``incsync.destinations.ownership``) refuses every publish of another recipient;
this command is the one way to change it, and the destination keeps a log of each move.
"""

from __future__ import annotations

import argparse
import getpass
import logging

from incsync.cli.parsing import Commands
from incsync.errors import ConfigError

log = logging.getLogger(__name__)


def cmd_transfer_ownership(args: argparse.Namespace) -> int:
    from incsync.config.load import load_config
    from incsync.destinations.registry import build_destination
    from incsync.paths import config_path

    file = config_path(args.config)
    config = load_config(file)
    try:
        model = config.model(args.model)
        recipient = config.recipient(args.recipient)
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    destination = build_destination(config.destination(recipient.destination))
    reason = f"incsync transfer-ownership by {getpass.getuser()}" + (f": {args.reason}" if args.reason else "")
    previous = destination.transfer_ownership(model=model, recipient=recipient, reason=reason)
    log.warning("model %s: destination %s moved from %s to recipient %s", model.model_name, destination.name, previous, recipient.id)
    print(
        f"model {model.model_name}: destination {destination.name} now belongs to recipient {recipient.id} "
        f"(tenant {recipient.id_in_provider_system}); previous owner: {previous or 'none'}. Its next transfer "
        "re-syncs the copy from the recipient's start."
    )
    return 0


def add_parser(sub: Commands) -> None:
    p = sub.add_parser("transfer-ownership", help="move a destination's copy of a model to another recipient (logged)")
    p.add_argument("model")
    p.add_argument("--to", dest="recipient", required=True, help="the new owner: its configured destination is re-stamped")
    p.add_argument("--reason", help="why, recorded with the move")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_transfer_ownership)

"""`incsync onboard create|attach|link|revoke|list|status|audit`: recipients connecting their own destinations,
as the provider manages them (docs/onboarding.md). A link's token is printed once, when it is issued; the store
keeps its digest only."""

from __future__ import annotations

import argparse
import getpass
import json
from typing import Any

from incsync.cli.parsing import Commands
from incsync.paths import config_path


def onboarding(args: argparse.Namespace) -> Any:
    from incsync.config.load import load_config
    from incsync.onboarding.place import onboarding_place
    from incsync.onboarding.service import Onboarding

    file = config_path(args.config)
    config = load_config(file)
    return Onboarding(onboarding_place(config, file), config)


def actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def link_url(args: argparse.Namespace, token: str) -> str:
    from incsync.config.load import load_config
    from incsync.sharing.server import public_url

    return f"{public_url(load_config(config_path(args.config)).sharing)}/onboard/{token}"


def _products(text: str | None) -> list[str] | None:
    return None if text is None else [p for p in (x.strip() for x in text.split(",")) if p]


def _show(states: list[Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps([s.as_json() for s in states], indent=2))
        return
    print(f"{'recipient':<24} {'state':<21} {'kind':<10} {'link':<8} {'products':<24} tier")
    for s in states:
        print(f"{s.id:<24} {s.state:<21} {s.kind or '-':<10} {s.link:<8} {','.join(s.products or []) or '(all)':<24} "
              f"{s.tier or '-'}")


def cmd_create(args: argparse.Namespace) -> int:
    state = onboarding(args).create(args.recipient, id_in_provider_system=args.id_in_provider_system,
                                    products=_products(args.products), tier=args.tier, actor=actor())
    print(f"recipient {state.id} created (disabled until it connects its destination); `incsync onboard link "
          f"{state.id}` issues its link")
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    state = onboarding(args).attach(args.recipient, products=_products(args.products), tier=args.tier, actor=actor())
    print(f"recipient {state.id}: products {','.join(state.products or []) or '(all)'}, tier {state.tier or '-'}")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    issued = onboarding(args).link(args.recipient, actor=actor())
    print(f"onboarding link for {issued.link.recipient} (shown once; single use; expires "
          f"{issued.link.expires_at.strftime('%Y-%m-%dT%H:%M:%SZ')}; earlier links revoked):")
    print(link_url(args, issued.token))
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    revoked = onboarding(args).revoke(args.recipient, actor=actor())
    print(f"recipient {args.recipient}: link(s) {', '.join(revoked)} revoked")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    _show(onboarding(args).states(), args.json)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    _show([onboarding(args).status(args.recipient)], args.json)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    rows = onboarding(args).audit_rows(args.recipient, limit=args.limit)
    if args.json:
        print(json.dumps([r.as_json() for r in rows], indent=2, default=str))
        return 0
    for r in rows:
        print(f"{r.at.strftime('%Y-%m-%dT%H:%M:%SZ')} {r.actor:<24} {r.action:<9} {r.recipient or '-':<20} "
              f"{json.dumps(r.detail, sort_keys=True, default=str)}")
    return 0


def add_parsers(sub: Commands) -> None:
    onboard = sub.add_parser("onboard", help="create recipients and issue the links with which they connect their own "
                                             "destinations (docs/onboarding.md)")
    actions = onboard.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("create", help="create a recipient (a row of the recipients_from table, disabled until connected)")
    p.add_argument("recipient")
    p.add_argument("--id-in-provider-system", required=True, help="its tenant value or schema in the sources")
    p.add_argument("--products", help="comma-separated products (default: every model)")
    p.add_argument("--tier", help="its schedule tier")
    p.set_defaults(func=cmd_create)
    p = actions.add_parser("attach", help="set a recipient's products and/or tier")
    p.add_argument("recipient")
    p.add_argument("--products", help="comma-separated products")
    p.add_argument("--tier")
    p.set_defaults(func=cmd_attach)
    for name, func, text in (("link", cmd_link, "issue a single-use, expiring link (printed once; revokes earlier ones)"),
                             ("revoke", cmd_revoke, "revoke a recipient's links")):
        p = actions.add_parser(name, help=text)
        p.add_argument("recipient")
        p.set_defaults(func=func)
    p = actions.add_parser("list", help="every recipient of the table and its connection state")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)
    p = actions.add_parser("status", help="one recipient's connection state")
    p.add_argument("recipient")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = actions.add_parser("audit", help="the audit rows: every change, who and when (never a secret)")
    p.add_argument("recipient", nargs="?")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit)
    for parser in actions.choices.values():
        parser.add_argument("-c", "--config")

"""`incsync serve` and `incsync share create|rotate|revoke|list`: the sharing server (Delta Sharing and the Iceberg
REST catalog) and the recipients' tokens as a provider manages them (docs/sharing.md). A token is shown once, in
the profile file it is minted into; for a recipient with Iceberg tables the file also holds its catalog's settings."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from incsync.cli.parsing import Commands
from incsync.errors import ConfigError
from incsync.paths import config_path

SECONDS_PER_DAY = 86_400


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def recipient_failures(file: Path) -> Callable[[str], list[str]]:
    """For the recipient's status page: its transfers that failed since its last success and were blamed on it, with
    their fix, from the Dagster instance's runs (``incsync transfers --blamed recipient``)."""
    def failures(recipient: str) -> list[str]:
        from incsync.config.load import load_config
        from incsync.operations.instance import dagster_instance
        from incsync.operations.statuses import list_transfers

        config, instance = load_config(file), dagster_instance(file)
        done = list_transfers(instance, config, recipient=recipient, status="SUCCESS", limit=1)
        since = done[0].created_at if done else None
        failed = list_transfers(instance, config, recipient=recipient, blamed="recipient", limit=5)
        return [f"{t.created_at:%Y-%m-%d %H:%M}Z, {', '.join(t.models)}: {t.blame_reason}" for t in failed
                if since is None or t.created_at > since]

    return failures


def cmd_serve(args: argparse.Namespace) -> int:
    from incsync.onboarding.web import server_routes
    from incsync.sharing.server import serve

    file = config_path(args.config)
    serve(file, extra=lambda f, c: server_routes(f, c, failures=recipient_failures(f)))
    return 0


def _shareable(file: Path, recipient_id: str):  # noqa: ANN202 - (IncsyncConfig, TokenStore, its Iceberg warehouse or None)
    from incsync.config.load import load_config
    from incsync.sharing.catalog import ICEBERG, Catalog
    from incsync.sharing.errors import SharingError
    from incsync.sharing.server import token_store

    config = load_config(file)
    try:
        recipient = config.recipient(recipient_id)
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    if not recipient.enabled:
        raise SharingError(f"recipient {recipient_id} is disabled (enabled: false); enable it before sharing with it")
    catalog = Catalog(config)
    if catalog.share_of(recipient_id, None) is None:
        raise SharingError(f"recipient {recipient_id}: its destination {recipient.destination} keeps none of its models "
                           "as a Delta or Iceberg table in a local folder or on S3, which is what the sharing server serves "
                           "(docs/sharing.md)")
    iceberg = catalog.share_of(recipient_id, ICEBERG)
    return config, token_store(file, config.sharing), iceberg.name if iceberg is not None else None


def _write(args: argparse.Namespace, config, minted, warehouse: str | None) -> str:  # noqa: ANN001 - IncsyncConfig, Minted
    from incsync.sharing.server import ICEBERG_PROFILE_KEY, iceberg_settings, profile, write_profile

    contents = profile(config.sharing, minted)
    if warehouse is not None:
        contents[ICEBERG_PROFILE_KEY] = iceberg_settings(config.sharing, minted, warehouse)
    if args.output == "-":
        print(json.dumps(contents, indent=2))
        return "standard output"
    path = Path(args.output or f"{args.recipient}.share")
    write_profile(path, contents)
    return str(path)


def _iceberg_line(config, warehouse: str | None) -> str:  # noqa: ANN001 - IncsyncConfig
    from incsync.sharing.server import ICEBERG_PROFILE_KEY, iceberg_uri

    if warehouse is None:
        return ""
    return (f"\n  Iceberg REST catalog: uri {iceberg_uri(config.sharing)}, warehouse {warehouse}, token: the profile's "
            f"(its \"{ICEBERG_PROFILE_KEY}\" entry holds all three)")


def cmd_share_create(args: argparse.Namespace) -> int:
    config, store, warehouse = _shareable(config_path(args.config), args.recipient)
    minted = store.create(args.recipient, lifetime_seconds=config.sharing.token_lifetime_days * SECONDS_PER_DAY)
    where = _write(args, config, minted, warehouse)
    print(f"recipient {args.recipient}: token {minted.record.id} expires {_when(minted.record.expires_at)}; its profile "
          f"is in {where} (it holds the token: hand it over as a secret){_iceberg_line(config, warehouse)}",
          file=sys.stderr if args.output == "-" else sys.stdout)
    return 0


def cmd_share_rotate(args: argparse.Namespace) -> int:
    config, store, warehouse = _shareable(config_path(args.config), args.recipient)
    minted, old = store.rotate(args.recipient, lifetime_seconds=config.sharing.token_lifetime_days * SECONDS_PER_DAY,
                               overlap_seconds=args.overlap_hours * 3600)
    where = _write(args, config, minted, warehouse)
    out = sys.stderr if args.output == "-" else sys.stdout
    print(f"recipient {args.recipient}: new token {minted.record.id} expires {_when(minted.record.expires_at)}; its "
          f"profile is in {where}{_iceberg_line(config, warehouse)}", file=out)
    for record in old:
        print(f"  old token {record.id} stays valid until {_when(record.expires_at)}", file=out)
    return 0


def cmd_share_revoke(args: argparse.Namespace) -> int:
    from incsync.config.load import load_config
    from incsync.sharing.server import token_store

    file = config_path(args.config)
    revoked = token_store(file, load_config(file).sharing).revoke(args.recipient, token_id=args.token)
    if not revoked:
        print(f"recipient {args.recipient} holds no unrevoked token")
    for record in revoked:
        print(f"recipient {args.recipient}: token {record.id} revoked; it is refused from now on")
    return 0


def cmd_share_list(args: argparse.Namespace) -> int:
    import time

    from incsync.config.load import load_config
    from incsync.sharing.server import token_store

    file = config_path(args.config)
    now = time.time()
    records = token_store(file, load_config(file).sharing).tokens(args.recipient)
    rows = [{"recipient": r.recipient, "token": r.id, "state": r.state(now), "created": _when(r.created_at),
             "expires": _when(r.expires_at), "revoked": _when(r.revoked_at)} for r in records]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'recipient':<20} {'token':<17} {'state':<8} {'created (UTC)':<21} {'expires (UTC)':<21} revoked (UTC)")
    for row in rows:
        print(f"{row['recipient']:<20} {row['token']:<17} {row['state']:<8} {row['created']:<21} {row['expires']:<21} "
              f"{row['revoked']}")
    return 0


def add_parsers(sub: Commands) -> None:
    p = sub.add_parser("serve", help="serve each recipient's copy over Delta Sharing and an Iceberg REST catalog "
                                     "(docs/sharing.md)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_serve)

    share = sub.add_parser("share", help="mint, rotate, revoke and list recipients' sharing tokens (Delta Sharing, Iceberg REST)")
    actions = share.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, func, text in (("create", cmd_share_create, "mint a recipient's first token into a profile file"),
                             ("rotate", cmd_share_rotate, "mint a new token; the old one keeps working for --overlap-hours")):
        p = actions.add_parser(name, help=text)
        p.add_argument("recipient")
        p.add_argument("-o", "--output", help="the profile file to write (default RECIPIENT.share; - : standard output)")
        if name == "rotate":
            p.add_argument("--overlap-hours", type=float, default=24.0,
                           help="how long the old token stays valid (default 24; 0: it stops at once)")
        p.add_argument("-c", "--config")
        p.set_defaults(func=func)
    p = actions.add_parser("revoke", help="revoke a recipient's tokens at once")
    p.add_argument("recipient")
    p.add_argument("--token", help="only this token id (default: every token of the recipient)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_share_revoke)
    p = actions.add_parser("list", help="list tokens (never the tokens themselves): state, creation, expiry")
    p.add_argument("recipient", nargs="?")
    p.add_argument("--json", action="store_true", help="one JSON array on standard output")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_share_list)

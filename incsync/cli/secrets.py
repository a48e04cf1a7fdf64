"""`incsync secrets set|delete|list|rotate-key|new-key`: the vault's entries as a provider manages them
(docs/secrets.md). A value is read from standard input or a prompt, never from the command line (where
shells and process listings keep it); nothing prints one back but `new-key`, whose output is a new key."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import timezone

from incsync.cli.parsing import Commands
from incsync.errors import InputError
from incsync.paths import config_path


def _store(args: argparse.Namespace):  # noqa: ANN202 - VaultStore
    from incsync.config.load import load_config
    from incsync.config.secrets import vault_place
    from incsync.secrets.errors import VaultError
    from incsync.secrets.stores import VaultStore

    file = config_path(args.config)
    place = vault_place(load_config(file), file.resolve().parent)
    if place is None:
        raise VaultError(f"{file} has no `vault:` section; add one saying where the vault's table is, e.g. "
                         "`vault: {path: ./vault.sqlite}` (docs/secrets.md)")
    return VaultStore(place)


def _read_value(name: str) -> str:
    """The value from a prompt (twice) on a terminal, else all of standard input less one final newline."""
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of vault entry {name}: ")
        if getpass.getpass("again: ") != value:
            raise InputError(f"the two values typed for vault entry {name} differ; nothing was stored")
    else:
        value = sys.stdin.read()
        value = value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value
    if not value:
        raise InputError(f"no value for vault entry {name}: pipe it on standard input (`incsync secrets set {name} "
                         "< file`) or type it at the prompt; nothing was stored")
    return value


def cmd_set(args: argparse.Namespace) -> int:
    from incsync.config.secrets import ENTRY_RE

    if getattr(args, "value", None) is not None:
        raise InputError(f"incsync secrets set takes no value on the command line, where shells and process listings "
                         f"keep it: pipe it on standard input (`incsync secrets set {args.name} < file`) or type it at "
                         "the prompt; nothing was stored")
    if not ENTRY_RE.match(args.name):
        raise InputError(f'"{args.name}" cannot name a vault entry: use letters, digits, _, . and - (at most 128)')
    store = _store(args)
    entry = store.set(args.name, _read_value(args.name))
    print(f"vault entry {entry.name} set, sealed under key {entry.key_id}, in {store.place.shown}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    store = _store(args)
    if not store.delete(args.name):
        raise InputError(f"vault entry {args.name} does not exist in {store.place.shown}; `incsync secrets list` "
                         "names them")
    print(f"vault entry {args.name} deleted from {store.place.shown}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from incsync.secrets.keys import KeyRing

    store = _store(args)
    ids = KeyRing.load(store.place).ids()
    rows = [{"name": e.name, "key": e.key_id,
             "sealed_under": "newest key" if e.key_id == ids[0] else "older key" if e.key_id in ids else "unknown key",
             "changed": e.updated_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")} for e in store.entries()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'entry':<32} {'key':<13} {'sealed under':<13} changed (UTC)")
    for row in rows:
        print(f"{row['name']:<32} {row['key']:<13} {row['sealed_under']:<13} {row['changed']}")
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    from incsync.secrets.keys import KeyRing

    store = _store(args)
    keys = KeyRing.load(store.place)
    resealed, current = store.rotate()
    print(f"{resealed} vault entries re-sealed under key {keys.primary_id}; {current} already were")
    if len(keys.keys) > 1:
        print(f"every entry is now sealed under the newest key: remove the older ones from {keys.where} "
              "wherever transfers run")
    return 0


def cmd_new_key(args: argparse.Namespace) -> int:
    from incsync.secrets.keys import new_key

    print(new_key())
    return 0


def add_parsers(sub: Commands) -> None:
    secrets = sub.add_parser("secrets", help="store, list and re-seal the vault's entries (docs/secrets.md)")
    actions = secrets.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, func, text in (
        ("set", cmd_set, "store an entry; its value is read from standard input or a prompt, never the command line"),
        ("delete", cmd_delete, "delete an entry"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("name", help="the entry, as destinations name it (vault:<name>)")
        if name == "set":  # taken only to refuse it without repeating it
            p.add_argument("value", nargs="?", help=argparse.SUPPRESS)
        p.add_argument("-c", "--config")
        p.set_defaults(func=func)
    p = actions.add_parser("list", help="list entries (never their values): the key that sealed each and its last change")
    p.add_argument("--json", action="store_true", help="one JSON array on standard output")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_list)
    p = actions.add_parser("rotate-key", help="re-seal every entry under the newest key (the first of the key variable)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_rotate_key)
    p = actions.add_parser("new-key", help="print a new vault key (to put first in the key variable or file)")
    p.set_defaults(func=cmd_new_key)

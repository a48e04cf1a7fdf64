"""`incsync init --source postgres --destination delta`: a commented starter configuration that validates.

Every field is explained where it is set; docs/config.md lists them all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from incsync.cli.parsing import Commands, LazyChoices
from incsync.errors import InputError

SOURCES = ("lake", "postgres", "mysql", "mariadb")

_SOURCE = {
    "lake": """\
  - name: lake
    vendor: lake
    path: ./data              # one folder per table: ./data/orders/*.parquet (relative to this file)
    format: parquet           # or csv (with a header line), json
""",
    "postgres": """\
  - name: app_db
    vendor: postgres
    jdbc_url: jdbc:postgresql://127.0.0.1:5432/app    # no password here
    user: incsync_reader                              # read-only credentials are enough
    password_env: APP_DB_PASSWORD                     # the variable holding the password: export it
""",
    "mysql": """\
  - name: app_db
    vendor: mysql
    jdbc_url: jdbc:mysql://127.0.0.1:3306/app         # no password here
    user: incsync_reader                              # read-only credentials are enough
    password_env: APP_DB_PASSWORD                     # the variable holding the password: export it
""",
    "mariadb": """\
  - name: app_db
    vendor: mariadb
    jdbc_url: jdbc:mariadb://127.0.0.1:3306/app       # no password here
    user: incsync_reader                              # read-only credentials are enough
    password_env: APP_DB_PASSWORD                     # the variable holding the password: export it
""",
}

TEMPLATE = """\
# incsync configuration: {source} -> {destination}. Written by `incsync init`; check it with
# `incsync validate -c {file}` (add --connect to reach the source), then `incsync transfer orders --dry-run`.
# Every field: docs/config.md. Secrets are never written here, only the names of the variables that hold them.

sources:
{source_block}
destinations:
{destination_block}
models:
  - model_name: orders                  # the asset, the destination table and the job are named after it
    source: {source_name}
    source_table: {table}               # or source_query: "SELECT ..."
    primary_key: [id]                   # upserts and validation use it
    last_modified_column: updated_at    # a timestamp set on every change: it drives the high watermark
    organization_column: organization_id  # the tenant column (or `tenancy: schema`: one schema per tenant)
    max_transfer_time_window_seconds: 86400  # daily windows (whole minutes/hours dividing a day also work)
    min_start_time_epoch: {start}       # first data to transfer (epoch seconds, UTC)
    frequency: "*/15 * * * *"           # the schedule (UTC cron): open window + the one just closed

recipients:
  - id: acme                            # the recipient partition key
    id_in_provider_system: "org_1"      # acme's value of organization_id
    destination: {destination_name}
"""


def _starters() -> dict[str, tuple[str, str]]:
    """Each destination kind (its own name, not an alias) -> (the starter's destination name, its block), from
    the kinds' models: imported here, not with the module, so the CLI's thin client loads no pydantic."""
    from incsync.config.destinations import DESTINATION_MODELS, model_kinds

    return {kind: (model.starter_name(), model.starter) for kind, model in DESTINATION_MODELS.items()
            if model_kinds(model)[0] == kind}


def starter_config(source: str, destination: str, *, file: str = "incsync.yaml", start: int = 1704067200) -> str:
    if source not in SOURCES:
        raise InputError(f'--source {source}: unknown; use one of {", ".join(SOURCES)}')
    starters = _starters()
    if destination not in starters:
        raise InputError(f'--destination {destination}: unknown; use one of {", ".join(starters)}')
    destination_name, destination_block = starters[destination]
    return TEMPLATE.format(
        source=source, destination=destination, file=file, source_block=_SOURCE[source].rstrip("\n"),
        destination_block=destination_block.rstrip("\n"), source_name="lake" if source == "lake" else "app_db",
        table="orders" if source in ("lake", "mysql", "mariadb") else "public.orders", start=start,
        destination_name=destination_name,
    )


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.output)
    if target.exists() and not args.force:
        raise InputError(f"{target} exists; choose another file with -o, or overwrite it with --force")
    target.write_text(starter_config(args.source, args.destination, file=str(target)))
    print(f"wrote {target}: edit the names marked in its comments, then `incsync validate -c {target}`")
    return 0


def add_parser(sub: Commands) -> None:
    p = sub.add_parser("init", help="write a commented starter configuration")
    p.add_argument("--source", default="postgres", choices=SOURCES, help="the source's vendor (default postgres)")
    p.add_argument("--destination", default="delta", choices=LazyChoices(_starters), metavar="KIND",
                   help="the destination's kind: %(choices)s (default %(default)s)")
    p.add_argument("-o", "--output", default="incsync.yaml", help="file to write (default incsync.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)

"""docs/config.md, generated from the configuration's pydantic fields and their descriptions.

`python scripts/gen_config_docs.py` rewrites it; a test fails when it is stale.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from incsync.config.alerts import AlertsConfig
from incsync.config.destinations import DESTINATION_MODELS
from incsync.config.jobs import AuditConfig, AutoWorkerConfig
from incsync.config.model import IncsyncConfig, MaintenanceConfig, ModelConfig, RecipientConfig, RecipientsFromConfig
from incsync.config.onboarding import OnboardingConfig
from incsync.config.products import ProductConfig, TierConfig
from incsync.config.secrets import SecretRef, VaultConfig
from incsync.config.sharing import SharingConfig
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig

SECTIONS: list[tuple[str, str, list[type[BaseModel]]]] = [
    ("The file", "Top-level keys of `incsync.yaml` (or the file `$INCSYNC_CONFIG` names).", [IncsyncConfig]),
    ("sources", "One entry per place data is read from; `vendor` chooses the kind.", [LakeSourceConfig, JdbcSourceConfig]),
    ("destinations", "One entry per place a recipient's copy is written to; `kind` chooses the kind.",
     list(dict.fromkeys(DESTINATION_MODELS.values()))),
    ("models", "One entry per shared table.", [ModelConfig]),
    ("recipients", "One entry per customer.", [RecipientConfig]),
    ("products", "Named sets of models; a recipient with `products` receives only their models.", [ProductConfig]),
    ("tiers", "Schedule tiers: a recipient tagged `tier: <name>` is transferred on the tier's cron.", [TierConfig]),
    ("recipients_from", "Recipients kept in a PostgreSQL table, beside those of the file.", [RecipientsFromConfig]),
    ("maintenance", "Compaction, vacuum and log checkpoints of the destinations (docs/maintenance.md).", [MaintenanceConfig]),
    ("audit", "The transfer log in the provider's own warehouse (docs/operations.md).", [AuditConfig]),
    ("alerts", "A webhook that hears of every failed transfer and whose it is to fix (docs/operations.md).", [AlertsConfig]),
    ("worker", "The worker `incsync transfer` starts on first use, reuses and lets exit when idle (docs/operations.md).",
     [AutoWorkerConfig]),
    ("sharing", "`incsync serve`: each recipient's copy over Delta Sharing, with its own token (docs/sharing.md).",
     [SharingConfig]),
    ("onboarding", "Recipients connecting their own destinations through a link and a page of `incsync serve` "
     "(docs/onboarding.md).", [OnboardingConfig]),
    ("vault", "Secrets sealed in a table under a key from one variable or file, named `vault:<entry>` by the "
     "destinations that connect with them (docs/secrets.md).", [VaultConfig]),
]


NAMES = """## Names: how incsync quotes them

Tables, schemas and columns are used exactly as written and always quoted in the SQL incsync builds:
`"..."` on PostgreSQL, `` `...` `` on MySQL/MariaDB, a quote character inside a name doubled. So upper
case, spaces, dashes, dots, quotes and reserved words work, and nothing is folded: write a name as the
database spells it (as `\\dn`, `\\dt` or `SHOW DATABASES` print it). On PostgreSQL, `BigCo` is the
schema made by `CREATE SCHEMA "BigCo"`; `CREATE SCHEMA BigCo` makes `bigco`.

- `source_table`: `table` or `schema.table`. A part that is not a plain word is quoted as database
  tools print it: `public."Order Lines"`, `` `shop`.`order lines` ``.
- Columns: any name but an empty one or one holding a control character, at most 128 characters.
- Schema tenancy (`tenancy: schema`): each recipient's `id_in_provider_system` is its schema (on
  MySQL/MariaDB, its database), read as `<schema>.<source_table>`, both quoted: `globex-eu`,
  `Acme Corp`, `BigCo` and `o'brien` all work. Every query that names the schema quotes it: reads and
  row counts, the column-type lookup in the catalog, the safe-horizon probe, `incsync verify`'s source
  side, and `incsync validate --connect` with its drift check. A `source_query` names its tables
  unqualified; they resolve in the recipient's schema (PostgreSQL: `search_path`, set to the quoted
  name; MySQL/MariaDB: the JDBC URL's database, which the driver takes as written).
- Refused, by `incsync validate` and again before any read, naming the recipient, the model and the fix:
  schema names the database cannot hold, or holds as another name.
  - Any database: an empty name, or one holding a NUL character.
  - PostgreSQL: more than 63 bytes (PostgreSQL cuts a longer name to 63 bytes, so two such schemas would
    be one).
  - MySQL/MariaDB: more than 64 characters, a trailing space, or a character beyond the Basic
    Multilingual Plane (an emoji): the server refuses these as database names. With a `source_query`,
    also a `?`: the driver ends the URL's database at the first `?` (read such a database with
    `source_table`, which names it in the query).
- MySQL/MariaDB and `lower_case_table_names`: with `0` (the default on Linux) database and table names
  are case-sensitive, so `BigCo` and `bigco` are two databases and each recipient reads exactly its own
  (the catalog lookup compares names byte for byte). With `1` or `2` the server folds them to lower
  case: `BigCo` then reads `bigco`, and two recipients whose schemas differ only in case read the same
  database.
- Lake sources: a recipient's schema is a folder, `<path>/<schema>/<table>`.
- Source, destination and model names and recipient ids name folders, tables and partition keys, so they
  keep to the patterns given in their fields above.
"""


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_type(a) for a in args if a is not type(None)))
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (list, tuple):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}" if args else "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if annotation is SecretRef:
        return "`vault:<entry>` or `env:<VARIABLE>`"
    names = {str: "text", int: "integer", bool: "true/false", float: "number"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        value = field.default_factory()
        return "empty" if not value else f"`{value}`"
    if field.default is None or field.default is PydanticUndefined:
        return "-"
    value = field.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _constraints(field: Any) -> str:
    out = []
    for meta in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "at least")):
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}" if attr != "min_length" else f"{sign} {value} item(s)")
        pattern = getattr(meta, "pattern", None)
        if pattern:
            out.append(f"matches `{pattern}`")
    return "; ".join(out)


def render() -> str:
    lines = [
        "# incsync configuration reference",
        "",
        "<!-- Generated from incsync/config/model.py, sources.py and destinations/ (a module per kind) by "
        "scripts/gen_config_docs.py: edit the field descriptions there. -->",
        "",
        "Secrets are never written in the file: it names the environment variables that hold them "
        "(`password_env`, `dsn_env`) or the vault entries (`dsn_secret: vault:<entry>`, docs/secrets.md). "
        "Relative paths are relative to the file. `incsync validate` checks a file; "
        "`incsync init` writes a commented starter; `examples/` holds runnable ones.",
        "",
    ]
    for title, intro, classes in SECTIONS:
        lines += [f"## {title}", "", intro, ""]
        for cls in classes:
            if len(classes) > 1:
                doc = (cls.__doc__ or "").strip().splitlines()[0]
                kinds = typing.get_args(cls.model_fields.get("vendor", cls.model_fields.get("kind")).annotation)
                lines += [f"### {title[:-1]} " + ", ".join(f"`{k}`" for k in kinds), "", doc, ""]
            lines += ["| field | type | default | description |", "|---|---|---|---|"]
            for name, field in cls.model_fields.items():
                key = field.alias or name
                constraints = _constraints(field)
                description = (field.description or "").replace("\n", " ").replace("|", "\\|")
                if constraints:
                    description += f" ({constraints})"
                lines.append(f"| `{key}` | {_type(field.annotation)} | {_default(field)} | {description} |")
            lines.append("")
    lines.append(NAMES)
    return "\n".join(lines)

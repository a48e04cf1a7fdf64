"""docs/config.md, generated from the configuration's pydantic fields and their descriptions.

`python scripts/gen_config_docs.py` rewrites it; a test fails when it is stale.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from incsync.config.model import IncsyncConfig, MaintenanceConfig, ModelConfig, RecipientConfig, RecipientsFromConfig
from incsync.config.destinations import DeltaDestinationConfig, ObjectStorageDestinationConfig, PostgresDestinationConfig
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig

SECTIONS: list[tuple[str, str, list[type[BaseModel]]]] = [
    ("The file", "Top-level keys of `incsync.yaml` (or the file `$INCSYNC_CONFIG` names).", [IncsyncConfig]),
    ("sources", "One entry per place data is read from; `vendor` chooses the kind.", [LakeSourceConfig, JdbcSourceConfig]),
    ("destinations", "One entry per place a recipient's copy is written to; `kind` chooses the kind.",
     [DeltaDestinationConfig, PostgresDestinationConfig, ObjectStorageDestinationConfig]),
    ("models", "One entry per shared table.", [ModelConfig]),
    ("recipients", "One entry per customer.", [RecipientConfig]),
    ("recipients_from", "Recipients kept in a PostgreSQL table, beside those of the file.", [RecipientsFromConfig]),
    ("maintenance", "Compaction, vacuum and log checkpoints of the destinations (docs/maintenance.md).", [MaintenanceConfig]),
]


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
        "<!-- Generated from incsync/config/model.py, config_sources.py and config_destinations.py by "
        "scripts/gen_config_docs.py: edit the field descriptions there. -->",
        "",
        "Secrets are never written in the file: it names the environment variables that hold them "
        "(`password_env`, `dsn_env`). Relative paths are relative to the file. `incsync validate` checks a file; "
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
    return "\n".join(lines)

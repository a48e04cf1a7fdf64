"""Loading the configuration: the file named by the argument, ``$INCSYNC_CONFIG`` or ``incsync.yaml``;
YAML and pydantic errors as one message per problem at its line; the ``recipients_from`` table's rows;
relative paths resolved against the file's folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError as PydanticValidationError

from incsync.config.checks import cross_check_problems, length_problems
from incsync.config.destinations import (
    DeltaDestinationConfig,
    ObjectStorageDestinationConfig,
    PostgresDestinationConfig,
)
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig, RecipientsFromConfig
from incsync.config.products import ProductConfig, TierConfig
from incsync.config.recipients_table import read_recipient_rows, recipients_source, rename_row_problems
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig
from incsync.config.yaml_load import load_yaml
from incsync.errors import ConfigError
from incsync.paths import CONFIG_ENV_VAR, config_path


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in (*_KINDS["vendor"], *_KINDS["kind"]) or str(part).startswith(
            ("function-", "tagged-union")
        ):
            continue  # discriminated-union branch names say nothing to the user
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


_KINDS = {
    "vendor": ["lake", "postgres", "mysql", "mariadb"],
    "kind": ["delta", "postgres", "object_storage", "duckdb", "iceberg", "mariadb", "mysql"],
}
# Source vendors people ask for that incsync does not read, and why.
_UNSUPPORTED = {"athena": "incsync has no Amazon Athena reader"}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed where ``loc`` points (for 'did you mean')."""
    section = next((p for p in loc if isinstance(p, str)), None)
    kinds = {
        "sources": [LakeSourceConfig, JdbcSourceConfig],
        "destinations": [DeltaDestinationConfig, PostgresDestinationConfig, ObjectStorageDestinationConfig],
        "models": [ModelConfig], "recipients": [RecipientConfig], "recipients_from": [RecipientsFromConfig],
        "products": [ProductConfig], "tiers": [TierConfig],
    }.get(section or "", [])
    depth = sum(1 for p in loc if not isinstance(p, int))
    if depth <= 1:
        kinds = [IncsyncConfig]
    names: list[str] = []
    for kind in kinds:
        for name, field in kind.model_fields.items():
            names.append(field.alias or name)
    return names


def _pydantic_message(err: Any) -> str:
    """pydantic's error in the file's terms: what is wrong and the fix, never pydantic's own wording."""
    kind, loc, given = err["type"], err["loc"], err.get("input")
    ctx = err.get("ctx") or {}
    shown = given if isinstance(given, str | int | float | bool) else None
    if kind == "extra_forbidden":
        import difflib

        close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc), n=1)
        hint = f'did you mean "{close[0]}"?' if close else "remove it, or see docs/config.md for the fields"
        return f"unknown field; {hint}"
    if kind == "missing":
        return "required field is missing; add it (docs/config.md lists every field)"
    if kind == "string_pattern_mismatch":
        return f'"{given}" must match {ctx.get("pattern")} (letters, digits, _ and - only)'
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tag = ctx.get("discriminator", "").strip("'") or ("vendor" if loc and loc[0] == "sources" else "kind")
        allowed = ", ".join(_KINDS.get(tag, []))
        if kind == "union_tag_not_found":
            return f"`{tag}` is missing; set it to one of {allowed}"
        if tag == "vendor" and ctx.get("tag") in _UNSUPPORTED:
            return f'{tag} "{ctx.get("tag")}" is not supported: {_UNSUPPORTED[ctx["tag"]]}; use one of {allowed}'
        return f'{tag} "{ctx.get("tag")}" is unknown; use one of {allowed}'
    if kind == "literal_error":
        return f'"{shown}" is not allowed; use one of {ctx.get("expected")}'
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f'expected a whole number, got "{shown}"' if shown is not None else "expected a whole number"
    if kind in ("bool_parsing", "bool_type"):
        return f'expected true or false, got "{shown}"' if shown is not None else "expected true or false"
    if kind in ("string_type",):
        return "expected text; quote it" if shown is not None else "expected text"
    if kind in ("list_type", "tuple_type"):
        return "expected a list, e.g. [a, b] or one `- item` per line"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a mapping of `key: value` lines"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        limit = next(iter(ctx.values()), "?")
        return f"{shown} is out of range; it must be {sign} {limit}"
    if kind == "too_short":
        return "is empty; list at least one"
    if kind in ("value_error", "assertion_error"):
        return err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return f"{err['msg'][0].lower()}{err['msg'][1:]}"


def parse_config(data: Any, *, path: str = "<memory>", base: Path | None = None) -> IncsyncConfig:
    """Validate a loaded YAML document; raise ConfigError with every problem at once.

    ``base`` is the folder relative paths are taken against (the file's; default the working directory).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, ["(top level): expected a mapping with sources, destinations, models, recipients"])
    try:
        cfg = IncsyncConfig.model_validate(data)
    except PydanticValidationError as exc:
        problems = [f"{_format_loc(err['loc'])}: {_pydantic_message(err)}" for err in exc.errors()]
        raise ConfigError(path, problems) from None
    problems = cross_check_problems(cfg) + length_problems(cfg)
    if not problems:
        from incsync.config.locations import shared_location_problems

        problems = shared_location_problems(cfg, base or Path.cwd())
    if problems:
        raise ConfigError(path, problems)
    return cfg


def load_config(path: str | os.PathLike[str] | None = None) -> IncsyncConfig:
    """Read and validate the file named by ``path``, ``$INCSYNC_CONFIG`` or ``incsync.yaml``.

    Relative lake and destination paths are resolved against the file's folder.
    """
    file = config_path(path)
    if not file.exists():
        raise ConfigError(str(file), [f"file not found; create it or point {CONFIG_ENV_VAR} at it"])
    text = file.read_text()
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(str(file), exc) from None
    try:
        return _load_parsed(file, data)
    except ConfigError as exc:
        if exc.path != str(file) or any(exc.lines):
            raise
        from incsync.config.lines import problem_lines

        raise ConfigError(exc.path, exc.problems, problem_lines(text, exc.problems)) from None


def _yaml_error(path: str, exc: yaml.YAMLError) -> ConfigError:
    """A YAML syntax error at its line in the file (PyYAML's own text cites "<unicode string>")."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = " ".join(filter(None, [getattr(exc, "context", None), getattr(exc, "problem", None)])) or str(exc)
    problem = (f"not valid YAML: {what}; check the indentation and quoting at column {mark.column + 1}" if mark
               else f"not valid YAML: {what}")
    return ConfigError(path, [problem], [mark.line + 1 if mark else None])


def _table_recipients(data: Any, path: str) -> list[dict[str, Any]]:
    """The recipient mappings of the ``recipients_from`` table ([] when the file names none)."""
    source = recipients_source(data, path=path) if isinstance(data, dict) else None
    if source is None:
        return []
    return read_recipient_rows(JdbcSourceConfig.model_validate(source), str(data["recipients_from"]["table"]), path=path)


def _load_parsed(file: Path, data: Any) -> IncsyncConfig:
    rows = _table_recipients(data, str(file))
    if rows:
        first_row = len(data.get("recipients") or [])
        data = {**data, "recipients": [*(data.get("recipients") or []), *rows]}
        try:
            cfg = parse_config(data, path=str(file), base=file.resolve().parent)
        except ConfigError as exc:
            table = str(data["recipients_from"]["table"])
            ids = [str(r.get("id")) for r in rows]
            raise ConfigError(exc.path, rename_row_problems(exc.problems, first_row=first_row, table=table, ids=ids)) from None
    else:
        cfg = parse_config(data, path=str(file), base=file.resolve().parent)
    return _resolve_paths(cfg, file.resolve().parent)


def _resolve_paths(cfg: IncsyncConfig, base: Path) -> IncsyncConfig:
    def resolve(p: str | None) -> str | None:
        if p is None or "://" in p or os.path.isabs(p):
            return p
        return os.path.normpath(os.path.join(base, p))  # no per-path stat: cheap for 10,000 destinations

    sources = [s.model_copy(update={"path": resolve(s.path)}) if isinstance(s, LakeSourceConfig) else s for s in cfg.sources]
    destinations = [
        d.model_copy(update={"path": resolve(d.path)}) if hasattr(d, "path") else d for d in cfg.destinations
    ]
    return cfg.model_copy(
        update={"sources": sources, "destinations": destinations, "staging_dir": resolve(cfg.staging_dir)}
    )

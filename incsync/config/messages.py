"""pydantic's validation errors in the file's terms: one line per problem, ``where: what is wrong and the fix``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from incsync.config.destinations import DESTINATION_MODELS
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig, RecipientsFromConfig
from incsync.config.products import ProductConfig, TierConfig
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig


def pydantic_problems(exc: ValidationError, *, prefix: tuple[Any, ...] = ()) -> list[str]:
    """One problem per error of ``exc``; ``prefix`` is where the validated value sits in the file."""
    errors = [{**err, "loc": (*prefix, *err["loc"])} for err in exc.errors()]
    return [f"{format_loc(err['loc'])}: {pydantic_message(err)}" for err in errors]


def format_loc(loc: tuple[Any, ...]) -> str:
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
    "kind": list(DESTINATION_MODELS),
}
# Source vendors people ask for that incsync does not read, and why.
_UNSUPPORTED = {"athena": "incsync has no Amazon Athena reader"}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed where ``loc`` points (for 'did you mean')."""
    section = next((p for p in loc if isinstance(p, str)), None)
    kinds = {
        "sources": [LakeSourceConfig, JdbcSourceConfig],
        # the entry's own kind when pydantic names it (its union branch), else every kind's
        "destinations": [DESTINATION_MODELS[p] for p in loc if p in DESTINATION_MODELS][:1]
        or list(dict.fromkeys(DESTINATION_MODELS.values())),
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


def pydantic_message(err: Any) -> str:
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

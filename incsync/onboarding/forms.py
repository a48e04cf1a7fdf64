"""The onboarding page's forms, generated from the destination models: one input per field a recipient fills
(its label the field's name, its help the field's description), the kind's secret as a write-only password
input. What the provider decides stays out: the destination's name, ``*_env`` settings (the provider's
processes), concurrency and mapping-valued settings."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from incsync.config.destinations import DESTINATION_MODELS, DestinationConfig
from incsync.config.messages import pydantic_problems

PROVIDER_FIELDS = ("name", "kind", "max_concurrent_transfers")
_DESTINATION: TypeAdapter[Any] = TypeAdapter(DestinationConfig)


@dataclass(frozen=True)
class Input:
    """One input of a kind's form."""

    name: str  # the field as the file writes it (its alias)
    help: str
    type: str  # text, number, checkbox, password, select
    required: bool
    default: str = ""
    choices: tuple[str, ...] = ()


def _type(info: FieldInfo) -> tuple[str, tuple[str, ...]] | None:
    annotation = info.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    first = args[0]
    if typing.get_origin(first) is typing.Literal:
        return "select", tuple(str(a) for a in typing.get_args(first))
    if first is bool:
        return "checkbox", ()
    if first in (int, float):
        return "number", ()
    if first is str:
        return "text", ()
    return None  # mappings, lists, references: not the recipient's to fill


def inputs(kind: str) -> list[Input]:
    """The form of ``kind``: its fields in the model's order, the secret last."""
    model = DESTINATION_MODELS[kind]
    out = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if name in PROVIDER_FIELDS or key.endswith("_env") or name == model.secret_field:
            continue
        found = _type(info)
        if found is None:
            continue
        shape, choices = found
        default = "" if info.is_required() or info.default is None else str(info.default)
        out.append(Input(key, info.description or "", shape, info.is_required(), default, choices))
    if model.secret_field:
        out.append(Input(model.secret_field, model.secret_help, "password", False))  # whether it may be empty: the model says
    return out


@dataclass(frozen=True)
class Entered:
    """A form as submitted: the destination's fields (no secret) and the secret typed, or the problems."""

    kind: str
    fields: dict[str, Any]
    secret: str | None
    problems: dict[str, str]  # input name (or "" for the whole form) -> what is wrong

    def shown(self, name: str) -> str:
        """What an input shows again after a test: its value, never the secret's."""
        value = self.fields.get(name, "")
        return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def entered(kind: str, form: dict[str, str], *, destination: str, secret_ref: str) -> Entered:
    """The form of ``kind`` read and validated by the kind's model, as destination ``destination`` whose secret
    is ``secret_ref`` (a reference; the value typed is returned apart)."""
    model = DESTINATION_MODELS[kind]
    fields: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for field in inputs(kind):
        raw = form.get(field.name, "")
        if field.type == "password":
            continue
        if field.type == "checkbox":
            fields[field.name] = raw in ("on", "true", "1")
        elif raw.strip() == "":
            if field.required:
                problems[field.name] = "required"
        elif field.type == "number":
            try:
                fields[field.name] = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
            except ValueError:
                problems[field.name] = "must be a number"
        else:
            fields[field.name] = raw.strip()
    secret = form.get(model.secret_field, "") if model.secret_field else ""
    if not problems:
        mapping = {"name": destination, "kind": kind, **fields}
        problem = _problem({**mapping, model.secret_field: secret_ref} if secret and model.secret_field else mapping)
        if problem and model.secret_field and not secret and not _problem({**mapping, model.secret_field: secret_ref}):
            problems[model.secret_field] = "required: it is never shown again, so type it each time you test or save"
        elif problem:
            problems[""] = problem
    return Entered(kind, fields, secret or None, problems)


def _problem(mapping: dict[str, Any]) -> str | None:
    """What the kind's model says of ``mapping``, in the file's words less the location; None when it passes."""
    try:
        _DESTINATION.validate_python(mapping)
    except ValidationError as exc:
        return "; ".join(line.split(": ", 1)[-1] for line in pydantic_problems(exc, prefix=("destinations", 0)))
    return None

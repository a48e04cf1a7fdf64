"""Length limits for names, ids and tags: they become paths, PostgreSQL identifiers and run tags.

63 characters for anything used as a name or key (PostgreSQL truncates identifiers past 63 bytes, so two
longer names could silently become one table), 255 for a tenant value or a tag value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from incsync.config.model import IncsyncConfig

MAX_NAME_LENGTH = 63
MAX_VALUE_LENGTH = 255


def _shown(text: str) -> str:
    return f'"{text[:20]}…"' if len(text) > 24 else f'"{text}"'


def too_long(what: str, text: str, limit: int) -> str | None:
    """``what`` names the setting; the message never repeats a long value in full."""
    if len(text) <= limit:
        return None
    return f"{what} {_shown(text)} is {len(text)} characters long; the limit is {limit}: shorten it"


def tag_length_problem(key: str, value: str) -> str | None:
    """A tag key has at most 63 characters, a value at most 255."""
    return too_long("tag key", key, MAX_NAME_LENGTH) or too_long(f"tag {key[:20]} value", str(value), MAX_VALUE_LENGTH)


def length_problems(cfg: IncsyncConfig) -> list[str]:
    """One problem per name, id, tenant value or tag past its limit."""
    problems: list[str] = []

    def check(where: str, what: str, text: str | None, limit: int = MAX_NAME_LENGTH) -> None:
        if text is not None and (problem := too_long(what, text, limit)):
            problems.append(f"{where}: {problem}")

    for i, s in enumerate(cfg.sources):
        check(f"sources[{i}].name", "name", s.name)
    for i, d in enumerate(cfg.destinations):
        check(f"destinations[{i}].name", "name", d.name)
        check(f"destinations[{i}].schema", "schema", getattr(d, "schema_name", None))
    for i, m in enumerate(cfg.models):
        check(f"models[{i}].model_name", "model name", m.model_name)
    for i, r in enumerate(cfg.recipients):
        check(f"recipients[{i}].id", "recipient id", r.id)
        check(f"recipients[{i}].id_in_provider_system", "tenant value", r.id_in_provider_system, MAX_VALUE_LENGTH)
        for key, value in r.tags.items():
            if problem := tag_length_problem(key, value):
                problems.append(f"recipients[{i}].tags: {problem}")
    return problems

"""What every section of the file model shares: the strict, frozen base model and the rules for ids and names."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

ID_PATTERN = r"^[A-Za-z0-9_-]+$"
ID_RE = re.compile(ID_PATTERN)
IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_COLUMN_NAME = 128


def listed_names(names: list[str], most: int = 20) -> str:
    """``a, b, c`` (the first ``most``, then ``...``): 10,000 recipients make no readable message."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def column_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a column name; None when it can. Names are used exactly as spelled (and
    quoted), so mixed case, spaces and reserved words are fine; control characters and empty names are not."""
    if not name.strip():
        return "is empty; name a column"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "holds a control character (NUL, newline, tab...); write the name as the database spells it"
    if len(name) > MAX_COLUMN_NAME:
        return f"is longer than {MAX_COLUMN_NAME} characters"
    return None


def table_name_problem(name: str, *, schema_tenanted: bool) -> str | None:
    """Why ``name`` cannot be a ``source_table``: `table` or `schema.table`, each part bare (`public.Order`,
    the case as typed) or quoted as database tools print it (`public."Order"`, `` `db`.`t` ``)."""
    from incsync.core.sql_text import split_qualified  # the package imports this module

    parts = split_qualified(name)
    if parts is None or len(parts) > 2 or any(column_name_problem(p) for p in parts):
        return (
            "must be `table` or `schema.table`; quote a part that is not a plain word with \"\" or ``, "
            'e.g. public."Order Lines"'
        )
    if schema_tenanted and len(parts) > 1:
        return "is schema-tenanted, so name the table alone; each recipient's schema is its id_in_provider_system"
    return None


class StrictModel(BaseModel):
    """A section of the file: unknown keys are refused, values never change once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

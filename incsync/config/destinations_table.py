"""Destinations kept in a database table (``recipients_from.destinations_table``), beside the file's.

One row per destination: ``name``, ``kind``, ``fields`` (a JSON object of the kind's fields, as the file
writes them) and ``secret`` (a reference such as ``vault:acme_pg``, never a secret: it fills the kind's
secret field, ``dsn_secret`` or ``password_secret``). It is read through the recipients table's source and
validated by the file's destination models; ``rows`` decides what a bad row disables.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from incsync.config.recipients_table import WHERE, read_table
from incsync.errors import ConfigError

if TYPE_CHECKING:
    from incsync.config.sources import JdbcSourceConfig

REQUIRED = ("name", "kind")
OPTIONAL = ("fields", "secret")
TABLE_SETTING = f"{WHERE}.destinations_table"


def row_label(table: str, name: str) -> str:
    """How messages name a row of the destinations table."""
    return f'destinations_table ({table}, row name "{name}")'


def read_destination_rows(config: JdbcSourceConfig, table: str, *, path: str) -> list[tuple[str, dict[str, Any] | str]]:
    """(name, destination mapping) per row of ``table``; a row that cannot make a mapping holds the problem
    instead, in the file's words."""
    names, rows = read_table(config, table, path=path, where=TABLE_SETTING)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise ConfigError(path, [f"{TABLE_SETTING}: table {table} lacks the column(s) {', '.join(missing)}; it needs "
                                 f"{', '.join(REQUIRED)} (and {', '.join(OPTIONAL)})"])
    return [_mapping(dict(zip(names, row, strict=False)), table) for row in rows]


def _mapping(values: dict[str, Any], table: str) -> tuple[str, dict[str, Any] | str]:
    from incsync.config.destinations import secret_fields

    name, kind = str(values.get("name")), values.get("kind")
    label = row_label(table, name)
    fields = values.get("fields")
    if isinstance(fields, str):
        try:
            fields = json.loads(fields)
        except json.JSONDecodeError:
            return name, f"{label}.fields: not JSON; write the kind's fields as one JSON object"
    fields = fields if fields is not None else {}
    if not isinstance(fields, dict):
        return name, f"{label}.fields: expected a JSON object of the kind's fields, e.g. {{\"schema\": \"acme\"}}"
    for column in REQUIRED:
        if column in fields:
            return name, f"{label}.fields: holds `{column}`, which is a column of its own; remove it from fields"
    secret = values.get("secret")
    mapping: dict[str, Any] = {"name": name, "kind": kind, **fields}
    if secret is not None:
        field = secret_fields().get(str(kind))
        if field is None:
            return name, f"{label}.secret: a {kind} destination takes no secret; leave it NULL"
        if field in fields:
            return name, f"{label}.secret: fields already set `{field}`; keep one of the two"
        mapping[field] = secret
    return name, mapping

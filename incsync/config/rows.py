"""The recipients and destinations tables merged with the file, row by row.

Each row is validated by the file's models and cross-checks; a bad row is refused with the file's kind of
message, naming its table and row, and disables only its own recipient (a destination row: the recipients
that name it), never the others (docs/design.md#recipients-and-secrets-as-data). What is refused is kept on
the configuration (``IncsyncConfig.refused_rows``) for ``incsync validate`` and the recipient sensor to say.
A problem of the file's own still fails the load, as it would without the tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from incsync.config.checks import cross_check_problems, length_problems
from incsync.config.destinations import DestinationConfig
from incsync.config.destinations_table import row_label
from incsync.config.locations import shared_location_problems
from incsync.config.messages import pydantic_problems
from incsync.config.model import IncsyncConfig, RecipientConfig
from incsync.errors import ConfigError

_DESTINATION: TypeAdapter[Any] = TypeAdapter(DestinationConfig)
_INDEX = re.compile(r"^(recipients|destinations)\[(\d+)\]")


@dataclass(frozen=True)
class RefusedRow:
    """A table row left out of the configuration, why, and the recipients it disables."""

    table: str
    row: str  # its recipient id or destination name
    label: str  # how messages name it
    problems: tuple[str, ...]
    recipients: tuple[str, ...] = ()  # the recipients it disables

    def lines(self) -> list[str]:
        """Its problems, then which recipients a destination row takes with it, one line each."""
        if not self.recipients or (self.recipients == (self.row,) and self.label.startswith("recipients_from")):
            return list(self.problems)
        return [*self.problems, f"{self.label}: so recipient(s) {', '.join(self.recipients)} are disabled until it "
                "is fixed"]


@dataclass
class TableRows:
    """What the tables hold: recipient mappings, and (name, mapping or the problem that made none) per destination."""

    recipients_table: str
    recipients: list[dict[str, Any]]
    destinations_table: str | None = None
    destinations: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)

    def recipient_label(self, rid: str) -> str:
        return f'recipients_from ({self.recipients_table}, row id "{rid}")'

    def destination_label(self, name: str) -> str:
        return row_label(str(self.destinations_table), name)


def _relabel(problems: list[str], label: str) -> list[str]:
    return [_INDEX.sub(label, p, count=1) for p in problems]


def merge_rows(cfg: IncsyncConfig, rows: TableRows, *, path: str, base: Path) -> IncsyncConfig:
    """``cfg`` (the file, validated by its models) with the tables' rows that pass every check; the others are
    in ``refused_rows``. Raises ConfigError for the file's own problems."""
    refused: list[RefusedRow] = []
    dest_rows, broken = _destination_rows(cfg, rows, refused)
    recipient_rows = _awaiting_destination(_recipient_rows(cfg, rows, refused), cfg.destinations + dest_rows, rows)
    file_recipients = list(cfg.recipients)

    def drop_users(names: set[str]) -> None:
        """Recipients of the file or the table whose destination row was refused go with it."""
        nonlocal file_recipients, recipient_rows
        for i, row in enumerate(refused):
            if row.table == rows.destinations_table and row.row in names and not row.recipients:
                users = tuple(r.id for r in [*file_recipients, *recipient_rows] if r.destination == row.row)
                refused[i] = RefusedRow(row.table, row.row, row.label, row.problems, users)
        file_recipients = [r for r in file_recipients if r.destination not in names]
        recipient_rows = [r for r in recipient_rows if r.destination not in names]

    drop_users(broken)
    recipient_rows = _one_copy_per_destination(cfg.destinations + dest_rows, file_recipients, recipient_rows, rows, refused)
    for _ in range(len(dest_rows) + len(recipient_rows) + 1):
        merged = cfg.model_copy(update={"destinations": [*cfg.destinations, *dest_rows],
                                        "recipients": [*file_recipients, *recipient_rows]})
        problems = cross_check_problems(merged) + length_problems(merged)
        if not problems:
            problems = shared_location_problems(merged, base)
        if not problems:
            merged._refused = tuple(refused)  # noqa: SLF001 - set once, while it is being built
            return merged
        own, dests, recips = _attribute(problems, first_destination=len(cfg.destinations),
                                        first_recipient=len(file_recipients))
        if not dests and not recips:
            raise ConfigError(path, own)
        for index, found in sorted(dests.items()):
            name = dest_rows[index].name
            label = rows.destination_label(name)
            refused.append(RefusedRow(str(rows.destinations_table), name, label, tuple(_relabel(found, label))))
        for index, found in sorted(recips.items()):
            rid = recipient_rows[index].id
            label = rows.recipient_label(rid)
            refused.append(RefusedRow(rows.recipients_table, rid, label, tuple(_relabel(found, label)), (rid,)))
        gone = {dest_rows[i].name for i in dests}
        dest_rows = [d for i, d in enumerate(dest_rows) if i not in dests]
        recipient_rows = [r for i, r in enumerate(recipient_rows) if i not in recips]
        drop_users(gone)
    raise AssertionError("every round refuses a row or ends")


def _destination_rows(cfg: IncsyncConfig, rows: TableRows, refused: list[RefusedRow]) -> tuple[list[Any], set[str]]:
    """The destination rows the models accept, and the names of those they refuse."""
    accepted: list[Any] = []
    names = {d.name for d in cfg.destinations}
    broken: set[str] = set()
    for name, mapping in rows.destinations:
        label = rows.destination_label(name)
        if isinstance(mapping, str):
            problems = [mapping]
        elif name in names:
            problems = [f'{label}.name: a destination named "{name}" is already defined by the file or an earlier row; '
                        "names must be unique"]
        else:
            try:
                accepted.append(_DESTINATION.validate_python(mapping))
                names.add(name)
                continue
            except ValidationError as exc:
                problems = _relabel(pydantic_problems(exc, prefix=("destinations", 0)), label)
        refused.append(RefusedRow(str(rows.destinations_table), name, label, tuple(problems)))
        if name not in names:
            broken.add(name)
    return accepted, broken


def _recipient_rows(cfg: IncsyncConfig, rows: TableRows, refused: list[RefusedRow]) -> list[RecipientConfig]:
    accepted = []
    ids = {r.id for r in cfg.recipients}
    for mapping in rows.recipients:
        rid = str(mapping.get("id"))
        label = rows.recipient_label(rid)
        if rid in ids:
            refused.append(RefusedRow(rows.recipients_table, rid, label, (
                f'{label}.id: recipient "{rid}" is already defined by the file or an earlier row; ids must be unique',)))
            continue
        try:
            accepted.append(RecipientConfig.model_validate(mapping))
            ids.add(rid)
        except ValidationError as exc:
            refused.append(RefusedRow(rows.recipients_table, rid, label,
                                      tuple(_relabel(pydantic_problems(exc, prefix=("recipients", 0)), label)), (rid,)))
    return accepted


def _awaiting_destination(recipients: list[RecipientConfig], destinations: list[Any],
                          rows: TableRows) -> list[RecipientConfig]:
    """Table rows that are disabled and name a destination no row or entry defines yet are left out, not refused:
    a recipient being onboarded, whose destination row its page writes (docs/onboarding.md)."""
    known = {d.name for d in destinations} | {name for name, _ in rows.destinations}
    return [r for r in recipients if r.enabled or r.destination in known]


def _one_copy_per_destination(destinations: list[Any], file_recipients: list[RecipientConfig],
                              recipient_rows: list[RecipientConfig], rows: TableRows,
                              refused: list[RefusedRow]) -> list[RecipientConfig]:
    """A destination that holds one recipient's copy keeps its first user (the file's before the table's); a
    later row naming it is refused."""
    by_name = {d.name: d for d in destinations}
    holder = {r.destination: r.id for r in file_recipients}
    kept = []
    for r in recipient_rows:
        d = by_name.get(r.destination)
        if d is not None and not d.shares_location and r.destination in holder:
            refused.append(RefusedRow(rows.recipients_table, r.id, rows.recipient_label(r.id), (
                f'{rows.recipient_label(r.id)}.destination: "{r.destination}" already holds recipient '
                f"{holder[r.destination]}'s copy; a {d.kind} destination holds one recipient's copy, so give {r.id} "
                "a destination of its own",), (r.id,)))
            continue
        holder.setdefault(r.destination, r.id)
        kept.append(r)
    return kept


def _attribute(problems: list[str], *, first_destination: int,
               first_recipient: int) -> tuple[list[str], dict[int, list[str]], dict[int, list[str]]]:
    """The file's own problems, and the table rows' by their index among the rows."""
    own: list[str] = []
    dests: dict[int, list[str]] = {}
    recips: dict[int, list[str]] = {}
    for problem in problems:
        match = _INDEX.match(problem)
        index = int(match.group(2)) if match else -1
        if match and match.group(1) == "destinations" and index >= first_destination:
            dests.setdefault(index - first_destination, []).append(problem)
        elif match and match.group(1) == "recipients" and index >= first_recipient:
            recips.setdefault(index - first_recipient, []).append(problem)
        else:
            own.append(problem)
    return own, dests, recips


def refused_lines(cfg: IncsyncConfig, *, most: int | None = None) -> list[str]:
    """Every refused row's lines (at most ``most``, then how many more)."""
    lines = [line for row in cfg.refused_rows for line in row.lines()]
    if most is not None and len(lines) > most:
        return [*lines[:most], f"... and {len(lines) - most} more lines about refused table rows (`incsync validate` "
                "lists them all)"]
    return lines

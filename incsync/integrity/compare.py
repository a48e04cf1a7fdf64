"""Row-by-row comparison of the buckets whose fingerprints differ: pure, on Python values.

Per key, with ``s`` the source row and ``d`` the destination's (docs/design.md#verify):
- ``s`` newer than the HW: pending (counted by the fingerprints, not here); older than the recipient's
  start: out of scope; either way ``d`` is not judged;
- ``d`` absent: missing; ``d`` older: stale; same last-modified, other values — or ``d`` newer than the
  source, which no transfer can produce: incorrect;
- ``d`` without any ``s``: orphaned — or, when the model keeps rows that left the tenant (``deletes:
  none``), retained: reported, never wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

from incsync.core.bounds import to_micros

Key = tuple[Any, ...]


@dataclass
class RowFindings:
    """Keys found wrong, by counter."""

    missing: list[Key] = field(default_factory=list)
    stale: list[Key] = field(default_factory=list)
    incorrect: list[Key] = field(default_factory=list)
    orphaned: list[Key] = field(default_factory=list)
    retained: list[Key] = field(default_factory=list)  # no longer the tenant's at the source, kept on purpose
    orphaned_rows: list[dict[str, Any]] = field(default_factory=list)  # their primary key values as the destination holds them
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, counter: str, key: Key, detail: str) -> None:
        getattr(self, counter).append(key)
        shown = self.examples.setdefault(counter, [])
        if len(shown) < 5:
            shown.append(detail)

    @property
    def to_retransfer(self) -> list[Key]:
        return [*self.missing, *self.stale, *self.incorrect]


def normalize(value: Any) -> Any:
    """One comparable form per value whichever reader returned it (Arrow, psycopg)."""
    if isinstance(value, datetime):
        return to_micros(value if value.tzinfo else value.replace(tzinfo=timezone.utc))
    if isinstance(value, Decimal):
        return value.normalize() if value == value else value
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"), default=str)
        except ValueError:
            return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (date, time)):
        return value.isoformat()
    return value


def key_of(row: dict[str, Any], primary_key: list[str]) -> Key:
    return tuple(normalize(row[c]) for c in primary_key)


def compare_rows(
    source: list[dict[str, Any]], destination: list[dict[str, Any]], *, primary_key: list[str], last_modified: str,
    values: list[str], start_micros: int, hw_micros: int | None, retain_orphans: bool = False,
) -> RowFindings:
    found = RowFindings()
    by_key = {key_of(r, primary_key): r for r in source}
    seen: set[Key] = set()
    for d in destination:
        key = key_of(d, primary_key)
        seen.add(key)
        s = by_key.get(key)
        if s is None and retain_orphans:
            found.note("retained", key, f"{key}: in the destination, no longer the tenant's in the source (kept: deletes none)")
            continue
        if s is None:
            found.note("orphaned", key, f"{key}: in the destination, not in the source")
            found.orphaned_rows.append({c: d[c] for c in primary_key})
            continue
        s_lm = normalize(s[last_modified])
        if s_lm is None or s_lm < start_micros or hw_micros is None or s_lm > hw_micros:
            continue
        d_lm = normalize(d[last_modified])
        if d_lm is None or d_lm < s_lm:
            found.note("stale", key, f"{key}: destination last-modified {d[last_modified]} older than the source's {s[last_modified]}")
        elif d_lm > s_lm:
            found.note("incorrect", key, f"{key}: destination last-modified {d[last_modified]} newer than the source's {s[last_modified]}")
        else:
            differ = [c for c in values if normalize(s.get(c)) != normalize(d.get(c))]
            if differ:
                found.note("incorrect", key, f"{key}: {', '.join(f'{c} {d.get(c)!r} != source {s.get(c)!r}' for c in differ[:3])}")
    for key, s in by_key.items():
        if key in seen:
            continue
        s_lm = normalize(s[last_modified])
        if s_lm is None or s_lm < start_micros or hw_micros is None or s_lm > hw_micros:
            continue
        found.note("missing", key, f"{key}: in the source (last-modified {s[last_modified]}), not in the destination")
    return found

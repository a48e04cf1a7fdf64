"""Schema changes between a destination and a staged batch: what is a widening, what drifted. No I/O.

A widening is a type change every old value survives unchanged (int → bigint, real → double,
varchar(n) → longer or text, numeric with at least as many integer and fraction digits, a finer
timestamp); destinations apply it in place. Any other changed type needs a full refresh
(docs/design.md#schema-changes). Two type systems are compared: Arrow types (Delta, object storage,
the staged batch) and PostgreSQL types as ``format_type`` spells them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from incsync.errors import SchemaError

if TYPE_CHECKING:  # pyarrow is imported where types are compared: a code server does not load it
    import pyarrow as pa

T = TypeVar("T")

SCHEMA_CHANGE = "schema_change"
SCHEMA_DRIFT = "schema_drift"

_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
_UNITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _arrow_norm(t: pa.DataType) -> pa.DataType:
    """The same logical type whatever the physical layout (string vs large_string, tz spelling)."""
    import pyarrow as pa

    if isinstance(t, pa.ExtensionType):
        return t
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t) and t.tz in ("UTC", "+00:00", "Etc/UTC", "Z"):
        return pa.timestamp(t.unit, tz="UTC")
    if pa.types.is_decimal(t):
        return pa.decimal128(t.precision, t.scale) if t.precision <= 38 else pa.decimal256(t.precision, t.scale)
    return t


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in its order: cast (to a type that holds every value),
    missing ones NULL. Readers use it to combine batches published before and after a widening."""
    import pyarrow as pa

    columns, fields = [], []
    for field in schema:
        if field.name in table.column_names:
            column = table[field.name]
            columns.append(column if column.type == field.type else column.cast(field.type))
            fields.append(field)
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
            fields.append(field.with_nullable(True))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def arrow_same(old: pa.DataType, new: pa.DataType) -> bool:
    return _arrow_norm(old) == _arrow_norm(new)


def _int_bits(t: pa.DataType) -> tuple[int, bool] | None:
    """(bit width, signed) of an Arrow integer type."""
    import pyarrow as pa

    return (t.bit_width, pa.types.is_signed_integer(t)) if pa.types.is_integer(t) else None


def _int_form(t: pa.DataType) -> tuple[int, bool]:
    """(bit width, signed) of a type known to be an integer."""
    found = _int_bits(t)
    assert found is not None, t
    return found


def _int_digits(t: pa.DataType) -> int:
    bits, signed = _int_form(t)
    return _INT_DIGITS[bits] + (0 if signed or bits < 64 else 1)


def _decimal_holds(p: int, s: int, p2: int, s2: int) -> bool:
    return s2 >= s and p2 - s2 >= p - s


def arrow_widens(old: pa.DataType, new: pa.DataType) -> bool:
    """True when every value of ``old`` is stored unchanged by ``new`` and the types differ."""
    import pyarrow as pa

    old, new = _arrow_norm(old), _arrow_norm(new)
    if old == new:
        return False
    if _int_bits(old) and _int_bits(new):
        (b1, s1), (b2, s2) = _int_form(old), _int_form(new)
        return b2 > b1 and (s1 == s2 or s2)  # a signed type never fits an unsigned one
    if _int_bits(old) and pa.types.is_floating(new):
        mantissa = {16: 11, 32: 24, 64: 53}[new.bit_width]
        return _int_form(old)[0] < mantissa
    if _int_bits(old) and pa.types.is_decimal(new):
        return new.scale >= 0 and new.precision - new.scale >= _int_digits(old)
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return new.bit_width > old.bit_width
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return _decimal_holds(old.precision, old.scale, new.precision, new.scale)
    if pa.types.is_timestamp(old) and pa.types.is_timestamp(new):
        return old.tz == new.tz and _UNITS[new.unit] > _UNITS[old.unit]
    if pa.types.is_time(old) and pa.types.is_time(new):
        return _UNITS[new.unit] > _UNITS[old.unit]
    return False


def arrow_type_name(t: pa.DataType) -> str:
    """A short SQL-like name for metadata and errors: integer, bigint, decimal(12,2), timestamp(us, UTC)."""
    import pyarrow as pa

    t = _arrow_norm(t)
    if _int_bits(t):
        bits, signed = _int_form(t)
        name = {8: "tinyint", 16: "smallint", 32: "integer", 64: "bigint"}[bits]
        return name if signed else f"unsigned {name}"
    if pa.types.is_floating(t):
        return {16: "half", 32: "real", 64: "double"}[t.bit_width]
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return f"timestamp({t.unit}{', ' + t.tz if t.tz else ''})"
    if pa.types.is_boolean(t):
        return "boolean"
    return str(t)


_PG_INTS = {"smallint": 16, "integer": 32, "bigint": 64}
_PG_TIME = re.compile(r"^(timestamp|time)(?:\((\d)\))? (with|without) time zone$")
_PG_SIZED = re.compile(r"^(character varying|numeric|bit varying)(?:\((\d+)(?:,(-?\d+))?\))?$")


def _pg_parts(name: str) -> tuple[str, tuple[int, ...]]:
    """``numeric(12,2)`` → ("numeric", (12, 2)); ``timestamp(3) with time zone`` → ("timestamp with time zone", (3,))."""
    name = " ".join(name.split()).lower()
    m = _PG_TIME.match(name)
    if m:
        return f"{m.group(1)} {m.group(3)} time zone", (int(m.group(2)) if m.group(2) else 6,)
    m = _PG_SIZED.match(name)
    if m:
        return m.group(1), tuple(int(g) for g in m.groups()[1:] if g is not None)
    return name, ()


def pg_widens(old: str, new: str) -> bool:
    """True when PostgreSQL can ``ALTER COLUMN TYPE`` from ``old`` to ``new`` keeping every value exactly."""
    (base1, mod1), (base2, mod2) = _pg_parts(old), _pg_parts(new)
    if (base1, mod1) == (base2, mod2):
        return False
    if base1 in _PG_INTS and base2 in _PG_INTS:
        return _PG_INTS[base2] > _PG_INTS[base1]
    if base1 in _PG_INTS and base2 == "numeric":
        return not mod2 or (len(mod2) == 1 and mod2[0] >= _INT_DIGITS[_PG_INTS[base1]]) or (
            len(mod2) == 2 and mod2[0] - mod2[1] >= _INT_DIGITS[_PG_INTS[base1]] and mod2[1] >= 0)
    if (base1 in ("smallint", "integer") and base2 == "double precision") or (base1, base2) == ("smallint", "real"):
        return True
    if (base1, base2) == ("real", "double precision"):
        return True
    if base1 == "character varying" and base2 in ("character varying", "text"):
        return base2 == "text" or not mod2 or (bool(mod1) and mod2[0] > mod1[0])
    if base1 == "bit varying" and base2 == "bit varying":
        return not mod2 or (bool(mod1) and mod2[0] > mod1[0])
    if base1 == "numeric" and base2 == "numeric":
        if not mod2:
            return True
        if not mod1:
            return False
        p1, s1 = mod1[0], mod1[1] if len(mod1) > 1 else 0
        p2, s2 = mod2[0], mod2[1] if len(mod2) > 1 else 0
        return _decimal_holds(p1, s1, p2, s2)
    if base1 == base2 and base1.startswith(("timestamp", "time ")):
        return mod2[0] > mod1[0]
    return False


@dataclass(frozen=True)
class TypeChange:
    """One column whose type differs between the destination (``old``) and the batch (``new``)."""

    column: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.column} {self.old}→{self.new}"


@dataclass(frozen=True)
class SchemaDiff:
    """How a staged batch's columns differ from the destination's."""

    added: tuple[tuple[str, str], ...] = ()  # (column, type) in the batch only
    dropped: tuple[str, ...] = ()  # in the destination only
    widened: tuple[TypeChange, ...] = ()  # the destination's type must widen to the batch's
    narrowed: tuple[TypeChange, ...] = ()  # the destination's type already holds every batch value
    incompatible: tuple[TypeChange, ...] = ()  # neither holds the other: a full refresh or an error

    def __bool__(self) -> bool:
        return bool(self.added or self.dropped or self.widened or self.narrowed or self.incompatible)

    def drift(self) -> str | None:
        """The ``schema_drift`` metadata: added, dropped and changed columns, or None when none."""
        parts = []
        if self.added:
            parts.append("added " + ", ".join(f"{c} {t}" for c, t in self.added))
        if self.dropped:
            parts.append("dropped " + ", ".join(self.dropped))
        changed = [*self.widened, *self.narrowed, *self.incompatible]
        if changed:
            parts.append("changed " + ", ".join(map(str, changed)))
        return "; ".join(parts) or None

    def applied(self, *, replaced: bool = False) -> str | None:
        """The ``schema_change`` metadata: what the destination did about the drift."""
        parts = [f"widened {c}" for c in self.widened]
        parts += [f"added {c} {t}" for c, t in self.added]
        parts += [f"kept {c.column} {c.old} (holds every {c.new} value)" for c in self.narrowed]
        parts += [f"kept dropped column {c} (NULL in new rows)" for c in self.dropped]
        if replaced:
            parts += [f"replaced {c} (full refresh)" for c in self.incompatible]
        return "; ".join(parts) or None

    def metadata(self, *, replaced: bool = False) -> dict[str, object]:
        return change_metadata(self, self, replaced=replaced)


def change_metadata(drift: SchemaDiff, applied: SchemaDiff, *, replaced: bool = False) -> dict[str, object]:
    """``schema_drift`` (against what was published before) and ``schema_change`` (what the destination
    did); empty when nothing drifted and nothing was changed."""
    out: dict[str, object] = {}
    if drift:
        out[SCHEMA_DRIFT] = drift.drift() or ""
    change = applied.applied(replaced=replaced)
    if change and (drift or applied.added or applied.widened or applied.incompatible):
        out[SCHEMA_CHANGE] = change
    return out


def diff(
    old: Mapping[str, T], new: Mapping[str, T], *, widens: Callable[[T, T], bool], same: Callable[[T, T], bool],
    name: Callable[[T], str],
) -> SchemaDiff:
    """Compare destination columns ``old`` with batch columns ``new`` (name → type)."""
    added = tuple((c, name(t)) for c, t in new.items() if c not in old)
    dropped = tuple(c for c in old if c not in new)
    widened, narrowed, incompatible = [], [], []
    for column, t in new.items():
        if column not in old or same(old[column], t):
            continue
        change = TypeChange(column, name(old[column]), name(t))
        if widens(old[column], t):
            widened.append(change)
        elif widens(t, old[column]):
            narrowed.append(change)
        else:
            incompatible.append(change)
    return SchemaDiff(added, dropped, tuple(widened), tuple(narrowed), tuple(incompatible))


def arrow_diff(old: pa.Schema, new: pa.Schema) -> SchemaDiff:
    return diff({f.name: f.type for f in old}, {f.name: f.type for f in new}, widens=arrow_widens, same=arrow_same,
                name=arrow_type_name)


def pg_diff(old: Mapping[str, str], new: Mapping[str, str]) -> SchemaDiff:
    return diff(old, new, widens=pg_widens, same=lambda a, b: _pg_parts(a) == _pg_parts(b), name=lambda t: t)


def incompatible_error(where: str, table: str, changes: tuple[TypeChange, ...], *, model: str, recipient: str) -> SchemaError:
    """One error naming each column, both types and the fix; nothing was published."""
    listed = "; ".join(f"column {c.column} is {c.old} in {table} but {c.new} in the source" for c in changes)
    return SchemaError(
        f"{where}: the source changed a column's type in a way {table} cannot hold in place ({listed}); "
        "nothing was published. Fix: reload the recipient with the new type "
        f"(incsync transfer {model} --recipient {recipient} --full-refresh), or cast the column back to its "
        "old type in the model's source_query."
    )

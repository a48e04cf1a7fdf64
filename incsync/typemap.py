"""Which form each source column travels in, so that every value arrives exactly (docs/types.md).

Spark's JDBC reader loses some values: decimals past 38 digits, unconstrained PostgreSQL ``numeric``,
``TIME`` (read as a millisecond timestamp), MariaDB ``BIT(n)``. For those columns the pushed-down
query casts the value to text (or an integer), and staging converts the text to a faithful Arrow type
(``decimal256``, ``time64[us]``) or keeps the exact text. A value the chosen type cannot hold fails
the transfer before publishing (``ConversionError``), naming model, column, source type and a key.
Pure logic: no Spark, no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.compute as pc

from incsync.errors import SchemaError

METADATA_KEY = "incsync"  # Spark column metadata: a ColumnPlan as JSON
SOURCE_TYPE = b"incsync.source_type"  # Arrow field metadata of staged columns
SOURCE_VENDOR = b"incsync.source_vendor"
ARROW_DECIMAL_DIGITS = 38  # decimal128; decimal256 holds 76

_DECIMAL_RE = re.compile(r"^(?:numeric|decimal)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
OVERRIDE_TYPES = {
    "text": "string", "boolean": "bool", "smallint": "int16", "integer": "int32", "bigint": "int64",
    "real": "float32", "double": "float64", "date": "date32", "time": "time64[us]",
}


class ConversionError(SchemaError):
    """A source value that the column's faithful type cannot hold; nothing was published."""


@dataclass(frozen=True)
class ColumnPlan:
    """How one column travels: ``cast`` in the source query (``text``/``integer``), then ``arrow`` in staging."""

    name: str
    vendor: str
    source_type: str
    cast: str | None = None  # "text", "text[]" or "integer": the database converts before Spark sees the value
    arrow: str | None = None  # the staged Arrow type, from text; None: as Spark reads it
    model: str = ""
    key: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> ColumnPlan:
        data = json.loads(text)
        return ColumnPlan(**{**data, "key": tuple(data.get("key", ()))})


def override_arrow(type_name: str) -> str | None:
    """The Arrow type a ``column_types:`` entry stands for; None when it is not one incsync knows."""
    name = type_name.strip().lower()
    if name in OVERRIDE_TYPES:
        return OVERRIDE_TYPES[name]
    match = _DECIMAL_RE.fullmatch(name)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if 1 <= precision <= 76 and scale <= precision:
            return f"decimal{'128' if precision <= ARROW_DECIMAL_DIGITS else '256'}({precision},{scale})"
    return None


OVERRIDE_HELP = "text, boolean, smallint, integer, bigint, real, double, date, time or decimal(p,s) with p <= 76"


def _decimal_form(precision: int, scale: int) -> str:
    """Exact Arrow form of ``numeric(p,s)``: decimal256 up to 76 digits, exact text beyond."""
    return f"decimal256({precision},{scale})" if precision <= 76 else "string"


def plan_column(
    *, vendor: str, name: str, spark_type: str, metadata: dict[str, object], catalog_type: str | None,
    override: str | None = None, model: str = "", key: tuple[str, ...] = (), last_modified: str | None = None,
) -> ColumnPlan:
    """The plan of one column, from Spark's JDBC type and metadata and (tables) the source catalog's type."""
    client = str(metadata.get("jdbcClientType", ""))
    source_type = catalog_type or _client_type_name(vendor, client)
    plan = ColumnPlan(name=name, vendor=vendor, source_type=source_type, model=model, key=key)
    if override is not None:
        return _with(plan, cast="text", arrow=override_arrow(override))
    kind = client.lower()
    if kind == "time" or (vendor != "postgres" and kind.startswith("time") and metadata.get("logical_time_type")):
        return _with(plan, cast="text", arrow="time64[us]")
    if kind == "timetz":
        return _with(plan, cast="text", arrow="string")  # no zoned time of day in Arrow: its exact text
    if vendor == "postgres" and kind in ("_numeric", "_time", "_timetz", "_money"):
        return _with(plan, cast="text[]")  # Spark would clamp/round the elements; each element's exact text
    if vendor == "postgres" and kind == "bit" and spark_type == "binary":
        return _with(plan, cast="text")  # bit(n): its bits as the text '10100101' (Spark: the ASCII bytes of it)
    if vendor == "postgres" and kind == "money":
        return _with(plan, cast="text", arrow="decimal128(19,2)")  # its amount, whatever lc_monetary prints
    if vendor in ("mysql", "mariadb") and kind == "bit" and spark_type == "binary":
        return _with(plan, cast="integer")  # its bits, as a 64-bit integer
    if vendor in ("mysql", "mariadb") and kind == "year":
        return _with(plan, cast="integer", arrow="int16")
    if vendor in ("mysql", "mariadb") and kind == "tinyint" and spark_type == "boolean":
        return _with(plan, cast="integer", arrow="bool")  # TINYINT(1): a boolean, loudly not when it holds 2
    if vendor in ("mysql", "mariadb") and kind == "datetime" and name != last_modified:
        # Spark shifts DATETIMEs before 1582-10-15 by the Julian/Gregorian gap; the text is exact.
        return _with(plan, cast="text", arrow="timestamp[us]")
    if vendor in ("mysql", "mariadb") and kind == "char":
        return _with(plan, cast="text")  # CHAR/ENUM/SET: as stored, not padded to the length by Spark
    if vendor == "postgres" and kind in ("date", "timestamp", "timestamptz") and name != last_modified:
        # Spark reads 'infinity' as 9999-12-31 23:59:59.999 and '-infinity' as a made-up date: refuse it instead.
        return _with(plan, cast=f"finite:{kind}")
    if spark_type.startswith("decimal"):
        return _decimal_plan(plan, spark_type, metadata, catalog_type)
    return plan


def _decimal_plan(plan: ColumnPlan, spark_type: str, metadata: dict[str, object], catalog_type: str | None) -> ColumnPlan:
    spark_precision, spark_scale = (int(x) for x in re.findall(r"\d+", spark_type)[:2])
    if catalog_type is not None:
        match = _DECIMAL_RE.match(catalog_type.lower())
        if match is None and catalog_type.lower().startswith(("numeric", "decimal")):
            return _with(plan, cast="text", arrow="string")  # unconstrained numeric: any scale, exact text
        if match is None:
            return plan  # an integer kind Spark reads as decimal (BIGINT UNSIGNED): exact already
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if precision <= ARROW_DECIMAL_DIGITS:
            return plan
        return _with(plan, cast="text", arrow=_decimal_form(precision, scale))
    # No catalog (a source_query): Spark clamps wider decimals to 38 digits and rounds the scale.
    declared_scale = int(metadata.get("scale", spark_scale))  # type: ignore[arg-type]
    unconstrained = plan.vendor == "postgres" and (spark_precision, spark_scale) == (38, 18) and declared_scale == 0
    if unconstrained or (spark_precision == ARROW_DECIMAL_DIGITS and declared_scale != spark_scale):
        return _with(plan, cast="text", arrow="string")
    return plan


def _with(plan: ColumnPlan, **changes: object) -> ColumnPlan:
    return ColumnPlan(**{**asdict(plan), **changes})


_PG_NAMES = {
    "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real", "float8": "double precision",
    "bool": "boolean", "varchar": "character varying", "bpchar": "character", "timestamptz": "timestamp with time zone",
    "timestamp": "timestamp without time zone", "time": "time without time zone", "timetz": "time with time zone",
}


def _client_type_name(vendor: str, client: str) -> str:
    """A type name from the JDBC driver's (PostgreSQL: ``_int4`` is ``integer[]``), when there is no catalog."""
    if vendor != "postgres":
        return client.lower()
    if client.startswith("_"):
        return _PG_NAMES.get(client[1:], client[1:]) + "[]"
    return _PG_NAMES.get(client, client)


def cast_sql(plan: ColumnPlan, quoted: str) -> str:
    """The select-list expression that reads ``quoted`` in the plan's form."""
    if plan.cast is None:
        return quoted
    if plan.vendor == "postgres":
        if plan.cast.startswith("finite:"):
            kind = plan.cast.removeprefix("finite:")
            key = " || ', ' || ".join(f"coalesce({_pg_ident(k)}::text, 'NULL')" for k in plan.key) or "'?'"
            message = _pg_string(f"{FINITE_MARK} column {plan.name} holds ") + f" || {quoted}::text || ' at key ' || {key}"
            return f"CASE WHEN {quoted} IS NULL OR isfinite({quoted}) THEN {quoted} ELSE ({message})::{kind} END"
        if plan.cast == "text[]":
            return f"{quoted}::text[]"
        return f"{quoted}::numeric::text" if plan.source_type == "money" else f"{quoted}::text"
    return f"CAST({quoted} AS {'SIGNED' if plan.cast == 'integer' else 'CHAR'})"


FINITE_MARK = "incsync:"


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _pg_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def arrow_type(name: str) -> pa.DataType:
    simple = {"string": pa.string(), "bool": pa.bool_(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
              "float32": pa.float32(), "float64": pa.float64(), "date32": pa.date32(), "time64[us]": pa.time64("us"),
              "timestamp[us]": pa.timestamp("us")}
    if name in simple:
        return simple[name]
    match = re.fullmatch(r"decimal(128|256)\((\d+),(\d+)\)", name)
    if match is None:
        raise ValueError(f"unknown Arrow type {name}")
    make = pa.decimal128 if match.group(1) == "128" else pa.decimal256
    return make(int(match.group(2)), int(match.group(3)))


def _convert_array(values: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if values.type == target:
        return values
    if pa.types.is_boolean(target) and pa.types.is_integer(values.type):
        outside = pc.sum(pc.and_(pc.is_valid(values), pc.invert(pc.is_in(values, pa.array([0, 1], values.type))))).as_py()
        if outside:
            raise pa.ArrowInvalid("a boolean holds 0 or 1 only")
    if pa.types.is_timestamp(target) and pa.types.is_string(values.type):
        # MySQL's zero date is its "no date": NULL, as its JDBC driver has always read it.
        zero = pc.starts_with(values, "0000-00-00")
        return pc.cast(pc.if_else(zero, pa.scalar(None, pa.string()), values), target)
    if pa.types.is_time(target) and pa.types.is_string(values.type):
        # Arrow parses no time of day from text: read it as a time on 1970-01-01 (out of range fails).
        stamped = pc.binary_join_element_wise(pa.scalar("1970-01-01 "), values, "")
        return pc.cast(pc.cast(stamped, pa.timestamp("us")), target)
    return pc.cast(values, target)


def convert_table(table: pa.Table, plans: dict[str, ColumnPlan]) -> pa.Table:
    """``table`` with each planned column in its Arrow form; ConversionError names the first bad value."""
    for name, plan in plans.items():
        if plan.arrow is None or name not in table.column_names:
            continue
        target = arrow_type(plan.arrow)
        index = table.column_names.index(name)
        try:
            converted = _convert_array(table[name], target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _conversion_error(table, plan, target, exc) from None
        table = table.set_column(index, pa.field(name, target, table.schema.field(index).nullable), converted)
    return table


def _conversion_error(table: pa.Table, plan: ColumnPlan, target: pa.DataType, exc: Exception) -> ConversionError:
    bad_value, bad_key = None, None
    for i, value in enumerate(table[plan.name].to_pylist()):
        try:
            _convert_array(pa.array([value], table[plan.name].type), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad_value = value
            bad_key = {k: table[k][i].as_py() for k in plan.key if k in table.column_names}
            break
    key = ", ".join(f"{k}={v!r}" for k, v in (bad_key or {}).items()) or "unknown"
    return ConversionError(
        f'model {plan.model}: column "{plan.name}" ({plan.vendor} {plan.source_type}) holds {bad_value!r} (key {key}), '
        f"which {target} cannot hold exactly ({' '.join(str(exc).split())[:160]}); nothing was published. "
        f'Set `column_types: {{"{plan.name}": {_suggestion(target)}}}` on the model to transfer it as a type that holds it.'
    )


def _suggestion(target: pa.DataType) -> str:
    return "smallint" if pa.types.is_boolean(target) else "text"


def field_metadata(plan: ColumnPlan) -> dict[bytes, bytes]:
    """What the staged Arrow field says about its source (the PostgreSQL destination keeps PostgreSQL types)."""
    return {SOURCE_TYPE: plan.source_type.encode(), SOURCE_VENDOR: plan.vendor.encode()}


def delta_form(schema: pa.Schema) -> pa.Schema:
    """Delta has no time of day and no decimal past 38 digits: those columns go as their exact text."""
    fields = []
    for f in schema:
        if pa.types.is_time(f.type) or pa.types.is_decimal256(f.type):
            f = f.with_type(pa.string())
        fields.append(f.remove_metadata())
    return pa.schema(fields, metadata=schema.metadata)


def to_delta(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    return pa.RecordBatch.from_arrays(
        [col if col.type == f.type else _as_text(col) for col, f in zip(batch.columns, schema, strict=True)],
        schema=schema,
    )


def _as_text(values: pa.Array) -> pa.Array:
    """Exact text: decimals in plain notation with their scale (Arrow would write 1E-30), times as HH:MM:SS.ffffff."""
    if pa.types.is_decimal(values.type):
        return pa.array([None if v is None else format(v, "f") for v in values.to_pylist()], pa.string())
    return pc.cast(values, pa.string())


# PostgreSQL types a PostgreSQL destination re-creates as the source has them (enums and other
# user-defined types go as text: the destination has no such type).
_PG_KEEP = {
    "smallint", "integer", "bigint", "real", "double precision", "numeric", "boolean", "text", "character varying",
    "character", "uuid", "json", "jsonb", "inet", "cidr", "macaddr", "macaddr8", "interval", "date", "bytea",
    "time without time zone", "time with time zone", "timestamp without time zone", "timestamp with time zone",
    "bit", "bit varying",
}
_TEXT_INPUT = {"numeric", "character varying", "character", "text", "uuid", "json", "jsonb", "inet", "cidr",
               "macaddr", "macaddr8", "interval", "time with time zone", "bit", "bit varying"}


def postgres_source_type(field: pa.Field) -> str | None:
    """The source's own PostgreSQL type for a staged column read from PostgreSQL, when the staged values
    load into it exactly; None: derive the type from Arrow."""
    meta = field.metadata or {}
    if meta.get(SOURCE_VENDOR) != b"postgres" or SOURCE_TYPE not in meta:
        return None
    spelled = meta[SOURCE_TYPE].decode()
    is_array = spelled.endswith("[]")
    base = re.sub(r"\(\d+(,\d+)?\)", "", spelled.removesuffix("[]")).strip()
    if base not in _PG_KEEP:
        return None
    t = field.type
    if is_array:
        return spelled if pa.types.is_list(t) or pa.types.is_large_list(t) else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return spelled if base in _TEXT_INPUT else None
    if pa.types.is_decimal(t):
        return spelled if base == "numeric" else None
    if pa.types.is_time(t):
        return spelled if base == "time without time zone" else None
    if pa.types.is_timestamp(t):
        return spelled if (t.tz is not None) == (base == "timestamp with time zone") else None
    return None


def _kind(t: pa.DataType) -> str:
    for name, check in (("text", pa.types.is_string), ("text", pa.types.is_large_string), ("timestamp", pa.types.is_timestamp),
                        ("decimal", pa.types.is_decimal), ("integer", pa.types.is_integer), ("float", pa.types.is_floating),
                        ("boolean", pa.types.is_boolean), ("date", pa.types.is_date), ("time", pa.types.is_time),
                        ("binary", pa.types.is_binary), ("binary", pa.types.is_large_binary), ("nested", pa.types.is_nested)):
        if check(t):
            return name
    return str(t)


def changed_kinds(current: pa.Schema, incoming: pa.Schema) -> list[str]:
    """Columns whose kind of value (text, timestamp, decimal, ...) differs between a table and a batch:
    a merge would fail or misread them (e.g. a TIME once staged as a timestamp, now as exact text)."""
    have = {f.name: f.type for f in current}
    return [
        f'column "{f.name}" holds {have[f.name]} in the table but {f.type} in the batch'
        for f in incoming
        if f.name in have and _kind(have[f.name]) != _kind(f.type)
    ]

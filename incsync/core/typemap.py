"""Which form each source column travels in, so that every value arrives exactly (docs/types.md).

Spark's JDBC reader loses some values: decimals past 38 digits, unconstrained PostgreSQL ``numeric``,
``TIME`` (read as a millisecond timestamp), MariaDB ``BIT(n)``. For those columns the pushed-down
query casts the value to text (or an integer), and staging converts the text to a faithful Arrow type
(``decimal256``, ``time64[us]``) or keeps the exact text (``type_conversion``; what each destination
makes of them: ``destination_types``). A value the chosen type cannot hold fails the transfer before
publishing (``type_conversion.ConversionError``), naming model, column, source type and a key.
This module plans each column and its select-list expression. Pure logic: no Spark, no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

METADATA_KEY = "incsync"  # Spark column metadata: a ColumnPlan as JSON
SOURCE_TYPE = b"incsync.source_type"  # Arrow field metadata of staged columns
SOURCE_VENDOR = b"incsync.source_vendor"
ARROW_DECIMAL_DIGITS = 38  # decimal128; decimal256 holds 76

_DECIMAL_RE = re.compile(r"^(?:numeric|decimal)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
OVERRIDE_TYPES = {
    "text": "string", "boolean": "bool", "smallint": "int16", "integer": "int32", "bigint": "int64",
    "real": "float32", "double": "float64", "date": "date32", "time": "time64[us]",
}


@dataclass(frozen=True)
class ColumnPlan:
    """How one column travels: ``cast`` in the source query (``text``/``integer``), then ``arrow`` in staging."""

    name: str
    vendor: str
    source_type: str
    cast: str | None = None  # "text", "text[]", "integer" or "epoch:<kind>": the database converts before Spark sees the value
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
        # Spark's JDBC reader cannot hold 'infinity' / '-infinity': read the integer behind the value (see INFINITY).
        return _with(plan, cast=f"epoch:{kind}")
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
    declared_scale = int(str(metadata.get("scale", spark_scale)))
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
        if plan.cast.startswith("epoch:"):
            return _pg_epoch(plan, quoted)
        if plan.cast == "text[]":
            return f"{quoted}::text[]"
        return f"{quoted}::numeric::text" if plan.source_type == "money" else f"{quoted}::text"
    return f"CAST({quoted} AS {'SIGNED' if plan.cast == 'integer' else 'CHAR'})"


FINITE_MARK = "incsync:"

# PostgreSQL's 'infinity' / '-infinity' in a date or timestamp column, staged exactly: such a column is read
# as the integer behind its value (microseconds / days since 1970-01-01) and staged as timestamp[us] /
# date32, with 'infinity' as the integer's greatest value and '-infinity' as its least. No finite date
# reaches those days; the one finite timestamp at the greatest microsecond (294247-01-10 04:00:54.775807
# UTC) is refused when read, so the extremes mean infinity only. The staged field's metadata (source
# vendor postgres, a date or timestamp source type) is what says a column may hold them: a PostgreSQL
# destination writes them back as 'infinity' / '-infinity', every other destination refuses them.
INFINITY = {"timestamp": (-(2**63), 2**63 - 1), "date": (-(2**31), 2**31 - 1)}


def _pg_epoch(plan: ColumnPlan, quoted: str) -> str:
    kind = plan.cast.removeprefix("epoch:") if plan.cast else ""
    least, greatest = INFINITY["date" if kind == "date" else "timestamp"]
    if kind == "date":
        finite = f"{quoted} - DATE '1970-01-01'"
        refused = ""
    else:
        key = " || ', ' || ".join(f"coalesce({_pg_ident(k)}::text, 'NULL')" for k in plan.key) or "'?'"
        message = _pg_string(f"{FINITE_MARK} column {plan.name} holds ") + f" || {quoted}::text || ' at key ' || {key}"
        limit = "'294247-01-10 04:00:54.775807" + ("+00'::timestamptz" if kind == "timestamptz" else "'::timestamp")
        finite = f"(extract(epoch FROM {quoted}) * 1000000)::bigint"
        refused = f" WHEN {quoted} >= {limit} THEN ({message})::bigint"
    sql_type = "integer" if kind == "date" else "bigint"
    return (f"CASE WHEN {quoted} = 'infinity' THEN ({greatest})::{sql_type} WHEN {quoted} = '-infinity' THEN "
            f"({least})::{sql_type}{refused} ELSE ({finite})::{sql_type} END")


def spark_from_epoch(plan: ColumnPlan, column: str) -> str | None:
    """The Spark SQL expression turning a column read by ``_pg_epoch`` (backquoted ``column``) back into
    its date or timestamp, whatever Spark's session time zone; None for any other plan."""
    kind = plan.cast.removeprefix("epoch:") if plan.cast and plan.cast.startswith("epoch:") else None
    if kind == "date":
        return f"date_from_unix_date({column})"
    if kind == "timestamptz":
        return f"timestamp_micros({column})"
    if kind == "timestamp":
        return f"timestampadd(MICROSECOND, {column}, TIMESTAMP_NTZ'1970-01-01 00:00:00')"  # a CAST would shift by the zone
    return None


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _pg_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"

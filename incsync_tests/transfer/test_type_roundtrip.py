"""Round trip per source vendor: generated values (edge values always included) written into a real
PostgreSQL or MariaDB table, transferred into Delta, PostgreSQL and object storage, read back equal to
the source value or its documented faithful form (docs/types.md).

Kept fast: one generated batch of rows per vendor (``INCSYNC_TYPE_EXAMPLES`` raises the number of batches).
"""

from __future__ import annotations

import json
import math
import os
import struct
import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incsync.core.vendor_sql import mysql_literal
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_env
from incsync_tests.support.jdbc import MariaDatabase, PgDatabase, maria_database, pg_database
from incsync_tests.support.jdbc_transfer import pg_destination_rows, transfer
from incsync_tests.support.lake import JAN1_EPOCH

EXAMPLES = int(os.environ.get("INCSYNC_TYPE_EXAMPLES", "1"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES == 1,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])
RECIPIENTS = {"r_delta": "delta", "r_pg": "postgres", "r_files": "object_storage"}
UPDATED_AT = datetime(2024, 1, 1, 12, tzinfo=timezone.utc)
UTC = timezone.utc


def _config(root: Path, db: PgDatabase | MariaDatabase) -> Path:
    user = db.user if isinstance(db, PgDatabase) else "root"
    doc = {
        "sources": [{"name": "db", "vendor": db.vendor, "jdbc_url": db.jdbc_url, "user": user}],
        "destinations": [
            {"name": "d_delta", "kind": "delta", "path": "./out/delta"},
            {"name": "d_pg", "kind": "postgres", "dsn_env": PG_DSN_ENV, "schema": "acme"},
            {"name": "d_files", "kind": "object_storage", "path": "./out/files"},
        ],
        "models": [{"model_name": "orders", "source": "db", "source_table": "orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "min_start_time_epoch": JAN1_EPOCH, "lookback_seconds": 0}],
        "recipients": [{"id": rid, "id_in_provider_system": "org_1", "destination": f"d_{rid[2:]}"} for rid in RECIPIENTS],
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _read_back(config: Path, spark: Any) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for rid, kind in RECIPIENTS.items():
        transfer(config, spark, recipient_id=rid)
        rows = pg_destination_rows(json_as_text=True)[0] if kind == "postgres" else Target(config, recipient=rid).rows()
        out[kind] = sorted(rows, key=lambda r: r["id"])
    return out


def _same(expected: Any, got: Any, canon: Callable[[Any], Any]) -> bool:
    if expected is None or got is None:
        return expected is None and got is None
    try:
        a, b = canon(expected), canon(got)
    except ValueError:  # e.g. JSON text that does not parse: reported with its row and column
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and type(a) is type(b)


def _decimal(v: Any) -> Any:
    d = Decimal(v) if isinstance(v, str) else v
    return "NaN" if d.is_nan() else d


def _decimal_text(v: Any) -> Any:
    """Exact decimal, same scale: Decimal('1.50') and '1.50' agree; '1.5' does not."""
    d = _decimal(v)
    return d if d == "NaN" else (d, d.as_tuple().exponent)


def _time(v: Any) -> time:
    return time.fromisoformat(v) if isinstance(v, str) else v


def _json(v: Any) -> Any:
    """Destinations give JSON back as its text; the source rows hold it as text too (``_json_text``)."""
    return json.loads(v) if isinstance(v, str) else v


def _json_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows with their JSON values as JSON text, so a JSON string ("null-text") is not read as JSON."""
    return [{**r, **{c: None if r[c] is None else json.dumps(r[c]) for c in columns}} for r in rows]


def _float4(v: Any) -> Any:
    """A real as float32: psycopg reads PostgreSQL's shortest float4 text ('-2.321531e+15') into a float64
    that differs from the float32 the column holds (-2321531023654912.0)."""
    return struct.unpack("f", struct.pack("f", v))[0] if isinstance(v, float) else v


def _plain(v: Any) -> Any:
    return v


def _check(columns: dict[str, Callable[[Any], Any]], source: list[dict[str, Any]], got: dict[str, list[dict[str, Any]]]) -> None:
    for kind, rows in got.items():
        assert [r["id"] for r in rows] == [r["id"] for r in source], kind
        for want, row in zip(source, rows, strict=True):
            for column, canon in columns.items():
                assert _same(want[column], row[column], canon), (kind, column, want["id"], want[column], row[column])


# PostgreSQL ------------------------------------------------------------------------------------

PG_COLUMNS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "i2": ("smallint", _plain), "i8": ("bigint", _plain), "n": ("numeric", _decimal_text),
    "n4030": ("numeric(40,30)", _decimal), "n102": ("numeric(10,2)", _decimal), "r": ("real", _float4),
    "d": ("double precision", _plain), "t": ("text", _plain), "b": ("bytea", _plain), "u": ("uuid", str),
    "dt": ("date", _plain), "tm": ("time", _time), "tsn": ("timestamp", _plain), "tsz": ("timestamptz", _plain),
    "ta": ("text[]", _plain), "ia": ("integer[]", _plain), "jb": ("jsonb", _json), "bo": ("boolean", _plain),
    "na": ("numeric[]", lambda v: [None if x is None else _decimal_text(x) for x in v]),
}
_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=6,
)


def _pg_decimals(bound: Decimal) -> st.SearchStrategy[Decimal]:
    """numeric values: PostgreSQL has one NaN (no sign, no signalling NaN as hypothesis also draws)."""
    return st.decimals(allow_nan=True, allow_infinity=False, min_value=-bound, max_value=bound, places=None).map(
        lambda d: Decimal("NaN") if d.is_nan() else d)


PG_VALUES = {
    "i2": st.integers(-(2**15), 2**15 - 1), "i8": st.integers(-(2**63), 2**63 - 1),
    "n": _pg_decimals(Decimal("1e40")),
    "n4030": st.decimals(places=30, min_value=Decimal("-9999999999.999999999999999999999999999999"),
                         max_value=Decimal("9999999999.999999999999999999999999999999")),
    "n102": st.decimals(places=2, min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99")),
    "r": st.floats(width=32), "d": st.floats(), "t": _text, "b": st.binary(max_size=8), "u": st.uuids(),
    "dt": st.dates(min_value=date(1000, 1, 1)), "tm": st.times(),
    "tsn": st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 1, 1)),
    "tsz": st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 1, 1)).map(lambda d: d.replace(tzinfo=UTC)),
    "ta": st.lists(st.none() | _text, max_size=3), "ia": st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=3),
    "jb": _json_values, "bo": st.booleans(),
    "na": st.lists(st.none() | _pg_decimals(Decimal("1e30")), max_size=3),
}
PG_EDGES = [
    {"i2": -(2**15), "i8": -(2**63), "n": Decimal("123456789012345678901234.123456789012345678901"),
     "n4030": Decimal("-9999999999.999999999999999999999999999999"), "n102": Decimal("-0.01"), "r": math.inf,
     "d": -math.inf, "t": "😀 ü \t", "b": b"", "u": uuid.UUID(int=0), "dt": date(1000, 1, 1), "tm": time(0),
     "tsn": datetime(1000, 1, 1, 0, 0, 0, 1), "tsz": datetime(1000, 1, 1, 12, tzinfo=UTC), "ta": [], "ia": [None],
     "jb": {"": [None, "😀"]}, "bo": False, "na": [Decimal("123456789012345678901234.123456789012345678901"), None]},
    {"i2": 2**15 - 1, "i8": 2**63 - 1, "n": Decimal("NaN"), "n4030": Decimal("0E-30"), "n102": Decimal("99999999.99"),
     "r": math.nan, "d": math.nan, "t": "", "b": b"\x00\xff", "u": uuid.UUID(int=2**128 - 1), "dt": date(9999, 12, 31),
     "tm": time(23, 59, 59, 999999), "tsn": datetime(2024, 2, 29, 0, 0, 0, 1), "tsz": datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC),
     "ta": [None, ""], "ia": [], "jb": [], "bo": True, "na": []},
    {c: None for c in PG_COLUMNS},
]


def _with_ids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": i, **row} for i, row in enumerate(rows, start=1)]


def _pg_round_trip(rows: list[dict[str, Any]], columns: dict[str, tuple[str, Callable[[Any], Any]]], *, name: str,
                   spark: Any, tmp_path_factory: Any, monkeypatch: Any) -> None:
    """Write ``rows`` into a PostgreSQL table of ``columns``, transfer them everywhere, compare what comes back."""
    from psycopg.types.json import Json, Jsonb

    json_columns = tuple(c for c, (t, _) in columns.items() if t in ("json", "jsonb"))
    root = tmp_path_factory.mktemp(name)
    with pg_database() as db, destination_env("postgres", monkeypatch):
        monkeypatch.setenv("INCSYNC_STAGING_DIR", str(root / "staging"))
        ddl = ", ".join(f"{c} {t}" for c, (t, _) in columns.items())
        db.execute(f"CREATE TABLE orders (id integer PRIMARY KEY, organization_id text, updated_at timestamptz, {ddl})")
        names = ["id", "organization_id", "updated_at", *columns]
        sql = f"INSERT INTO orders ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"
        for row in rows:
            wrap = {c: Jsonb if columns[c][0] == "jsonb" else Json for c in json_columns}
            values = {**row, **{c: None if row[c] is None else wrap[c](row[c]) for c in json_columns}}
            db.execute(sql, [row["id"], "org_1", UPDATED_AT, *(values[c] for c in columns)])
        got = _read_back(_config(root, db), spark)
    _check({c: canon for c, (_, canon) in columns.items()}, _json_text(rows, json_columns), got)


@SETTINGS
@given(generated=st.lists(st.fixed_dictionaries(PG_VALUES), min_size=10, max_size=20))
def test_postgres_values_round_trip_into_every_destination(generated, spark, tmp_path_factory, monkeypatch) -> None:
    rows = _with_ids([*PG_EDGES, *generated])
    _pg_round_trip(rows, PG_COLUMNS, name="pg_roundtrip", spark=spark, tmp_path_factory=tmp_path_factory, monkeypatch=monkeypatch)


# Without bytea and arrays, the PostgreSQL destination loads its stage through Arrow's CSV writer; JSON
# text goes that way too: 'null' stays JSON null apart from SQL NULL, quotes, commas and newlines intact.
PG_CSV_COLUMNS = {c: PG_COLUMNS[c] for c in PG_COLUMNS if c not in ("b", "ta", "ia", "na")} | {"js": ("json", _json)}
PG_CSV_VALUES = {c: PG_VALUES[c] for c in PG_CSV_COLUMNS if c in PG_VALUES} | {"js": _json_values}
PG_CSV_EDGES = [
    {**{c: row[c] for c in PG_CSV_COLUMNS if c in row}, "js": js, "jb": jb}
    for row, js, jb in zip(PG_EDGES, [{"a": 'x,"y"\n\\z'}, None, None], [None, {"q": "\",\r\n"}, None], strict=True)
] + [{**{c: None for c in PG_CSV_COLUMNS}, "t": '","\n,', "jb": "null-text", "js": [None]}]


@SETTINGS
@given(generated=st.lists(st.fixed_dictionaries(PG_CSV_VALUES), min_size=10, max_size=20))
def test_postgres_values_without_bytea_round_trip_through_the_csv_stage(generated, spark, tmp_path_factory, monkeypatch) -> None:
    from incsync.destinations.postgres import load as postgres_load

    csv_batches: list[int] = []
    storage = postgres_load._csv_storage
    monkeypatch.setattr(postgres_load, "_csv_storage", lambda b: (csv_batches.append(b.num_rows), storage(b))[1])
    rows = _with_ids([*PG_CSV_EDGES, *generated])
    _pg_round_trip(rows, PG_CSV_COLUMNS, name="pg_csv_roundtrip", spark=spark, tmp_path_factory=tmp_path_factory, monkeypatch=monkeypatch)
    assert sum(csv_batches) == len(rows)  # the PostgreSQL destination took the CSV path, every row


# MariaDB ---------------------------------------------------------------------------------------

MARIA_COLUMNS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "ti": ("TINYINT", _plain), "tu": ("TINYINT UNSIGNED", _plain), "iu": ("INT UNSIGNED", _plain),
    "bi": ("BIGINT", _plain), "bu": ("BIGINT UNSIGNED", int), "d65": ("DECIMAL(65,30)", _decimal),
    "d10": ("DECIMAL(10,2)", _decimal), "dbl": ("DOUBLE", _plain), "b8": ("BIT(8)", _plain), "y": ("YEAR", _plain),
    "bo": ("BOOLEAN", _plain), "dt": ("DATE", _plain), "tm": ("TIME(6)", _time), "dtt": ("DATETIME(6)", _plain),
    "vc": ("VARCHAR(20)", _plain), "bl": ("BLOB", _plain), "e": ("ENUM('a','bb','ccc')", _plain),
}
_maria_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=10).map(str.rstrip)
MARIA_VALUES = {
    "ti": st.integers(-128, 127), "tu": st.integers(0, 255), "iu": st.integers(0, 2**32 - 1),
    "bi": st.integers(-(2**63), 2**63 - 1), "bu": st.integers(0, 2**64 - 1),
    "d65": st.decimals(places=30, min_value=-(Decimal(10) ** 35) + 1, max_value=Decimal(10) ** 35 - 1),
    "d10": st.decimals(places=2, min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99")),
    "dbl": st.floats(allow_nan=False, allow_infinity=False), "b8": st.integers(0, 255), "y": st.integers(1901, 2155),
    "bo": st.booleans(), "dt": st.dates(min_value=date(1000, 1, 1)), "tm": st.times(),
    "dtt": st.datetimes(min_value=datetime(1000, 1, 1)), "vc": _maria_text, "bl": st.binary(max_size=8),
    "e": st.sampled_from(["a", "bb", "ccc"]),
}
MARIA_EDGES = [
    {"ti": -128, "tu": 255, "iu": 2**32 - 1, "bi": -(2**63), "bu": 2**64 - 1,
     "d65": Decimal("99999999999999999999999999999999999.999999999999999999999999999999"), "d10": Decimal("-0.01"),
     "dbl": 2.2250738585072014e-308, "b8": 0b10100101, "y": 1901, "bo": True, "dt": date(1000, 1, 1), "tm": time(23, 59, 59, 999999),
     "dtt": datetime(1000, 1, 1, 0, 0, 0, 1), "vc": "😀 ü", "bl": b"\x00\xff", "e": "a"},
    {"ti": 127, "tu": 0, "iu": 0, "bi": 2**63 - 1, "bu": 0, "d65": Decimal("-0.000000000000000000000000000001"),
     "d10": Decimal("0.00"), "dbl": -1.7976931348623157e308, "b8": 255, "y": 2155, "bo": False, "dt": date(9999, 12, 31),
     "tm": time(0), "dtt": datetime(9999, 12, 31, 23, 59, 59, 999999), "vc": "", "bl": b"", "e": "ccc"},
    {c: None for c in MARIA_COLUMNS},
]


def _maria_literal(column: str, value: Any) -> str:
    if value is None:
        return "NULL"
    if column == "bl":
        return f"X'{value.hex()}'"
    if column == "b8":
        return f"b'{value:08b}'"
    if column == "bo":
        return "TRUE" if value else "FALSE"
    if column == "dbl":
        return repr(value)
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, (date, time)):
        return f"'{value.isoformat(sep=' ') if isinstance(value, datetime) else value.isoformat()}'"
    return mysql_literal(value)


@SETTINGS
@given(generated=st.lists(st.fixed_dictionaries(MARIA_VALUES), min_size=10, max_size=20))
def test_mariadb_values_round_trip_into_every_destination(generated, spark, tmp_path_factory, monkeypatch) -> None:
    rows = _with_ids([*MARIA_EDGES, *generated])
    root = tmp_path_factory.mktemp("maria_roundtrip")
    with maria_database() as db, destination_env("postgres", monkeypatch):
        monkeypatch.setenv("INCSYNC_STAGING_DIR", str(root / "staging"))
        columns = ", ".join(f"{c} {t}" for c, (t, _) in MARIA_COLUMNS.items())
        db.execute(f"CREATE TABLE orders (id INT PRIMARY KEY, organization_id VARCHAR(10), updated_at TIMESTAMP(6) NOT NULL, "
                   f"{columns}) DEFAULT CHARSET=utf8mb4")
        values = ", ".join(
            "(" + ", ".join([str(r["id"]), "'org_1'", "'2024-01-01 12:00:00'", *(_maria_literal(c, r[c]) for c in MARIA_COLUMNS)]) + ")"
            for r in rows
        )
        db.execute(f"SET NAMES utf8mb4; SET time_zone = '+00:00'; INSERT INTO orders VALUES {values};")
        got = _read_back(_config(root, db), spark)
    _check({c: canon for c, (_, canon) in MARIA_COLUMNS.items()}, rows, got)


def test_time_canon_reads_the_delta_text_form() -> None:
    assert _time("13:14:15.123456") == time(13, 14, 15, 123456)
    assert _same(Decimal("1.50"), "1.50", _decimal_text) and not _same(Decimal("1.50"), "1.5", _decimal_text)
    assert _same(timedelta(0), timedelta(0), _plain)

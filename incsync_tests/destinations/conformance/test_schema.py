"""Conformance: schema changes and types — widening in place, added and dropped columns, and every
staged Arrow type of the type map read back exactly (docs/types.md), for every destination kind.

The source here is the lake (Parquet), read without Spark; vendor-specific source types are the
business of ``incsync_tests/sources/test_types_*``.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync_tests.destinations.conformance.kinds import BY_NAME, KINDS, stored_type
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, ts, write_table
from incsync_tests.support.schema_change import BASE, BIG
from incsync_tests.support.schema_change import row as _row
from incsync_tests.support.schema_change import set_type as _set


def _config(root: Path, kind: str, rows: list[dict[str, Any]], schema: pa.Schema = BASE) -> Path:
    write_table(root / "src", "orders", rows, schema=schema)
    return lake_config(
        root,
        recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
        destinations=[destination_spec(kind)],
        model={"columns": None, "lookback_seconds": 0},
    )


def _rows(target: Target) -> list[dict[str, Any]]:
    return sorted(target.rows(), key=lambda r: r["id"])


@pytest.mark.parametrize("kind", KINDS)
def test_widening_int_to_bigint_is_applied_in_place(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        first = [_row(1, 1, qty=7), _row(2, 2, qty=8)]
        config = _config(tmp_path, kind, first)
        run(config, "2024-01-01", scheduled=False)
        target = Target(config)

        rows = [first[0], _row(2, 3, qty=BIG), _row(3, 4, qty=BIG + 1)]
        write_table(tmp_path / "src", "orders", rows, schema=_set(BASE, "qty", pa.int64()))
        outcome = run(config, "2024-01-01", scheduled=True)
        assert outcome.record.transfer_type == "INCREMENTAL"
        assert (outcome.destination_metadata["schema_change"], outcome.destination_metadata["schema_drift"]) == (
            "widened qty integer→bigint", "changed qty integer→bigint")
        assert stored_type(target, "qty") == BY_NAME[kind].wide_int_type
        assert [(r["id"], r["qty"]) for r in _rows(target)] == [(1, 7), (2, BIG), (3, BIG + 1)]
        assert target.state().last_transfer == outcome.record

        # The next run sees the wider type as the destination's: no drift, an ordinary upsert.
        rows = [*rows, _row(4, 5, qty=-BIG)]
        write_table(tmp_path / "src", "orders", rows, schema=_set(BASE, "qty", pa.int64()))
        outcome = run(config, "2024-01-01", scheduled=True)
        assert "schema_drift" not in outcome.destination_metadata
        assert [(r["id"], r["qty"]) for r in _rows(target)] == [(1, 7), (2, BIG), (3, BIG + 1), (4, -BIG)]


@pytest.mark.parametrize("kind", KINDS)
def test_added_and_dropped_columns_are_reported_and_kept(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        config = _config(tmp_path, kind, [_row(1, 1, code="a")])
        run(config, "2024-01-01", scheduled=False)
        target = Target(config)
        evolved = BASE.remove(BASE.get_field_index("code")).append(pa.field("note", pa.string()))
        write_table(tmp_path / "src", "orders", [{**_row(2, 2, note="gift"), "code": None}], schema=evolved)
        outcome = run(config, "2024-01-01", scheduled=True)
        assert outcome.record.transfer_type == "INCREMENTAL"
        assert outcome.destination_metadata["schema_drift"] == f"added note {BY_NAME[kind].text_type}; dropped code"
        assert outcome.destination_metadata["schema_change"].endswith("; kept dropped column code (NULL in new rows)")
        assert [(r["id"], r["code"], r["note"]) for r in _rows(target)] == [(1, "a", None), (2, None, "gift")]


UTC = timezone.utc
TYPED = pa.schema([
    ("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC")),
    ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()), ("f64", pa.float64()), ("flag", pa.bool_()),
    ("d38", pa.decimal128(38, 0)), ("d38_10", pa.decimal128(38, 10)), ("d12_2", pa.decimal128(12, 2)),
    ("text", pa.string()), ("bytes", pa.binary()), ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")),
])
TYPED_ROWS = [
    {"id": 1, "organization_id": "org_1", "updated_at": ts(1, 1), "i16": -32768, "i32": 2**31 - 1, "i64": -(2**63),
     "f64": 1.5e-300, "flag": True, "d38": Decimal("9" * 38), "d38_10": Decimal("-" + "9" * 28 + "." + "9" * 10),
     "d12_2": Decimal("-0.01"), "text": "naïve 🚀 'quoted' \"double\"", "bytes": b"\x00\xff\x10",
     "day": date(1, 1, 1), "at": datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)},
    {"id": 2, "organization_id": "org_1", "updated_at": ts(1, 2, 3, 4, 999_999), "i16": 32767, "i32": -(2**31), "i64": 2**63 - 1,
     "f64": -0.0, "flag": False, "d38": Decimal("-" + "9" * 38), "d38_10": Decimal("0.0000000001"),
     "d12_2": Decimal("9999999999.99"), "text": "", "bytes": b"", "day": date(9999, 12, 31),
     "at": datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)},
    {"id": 3, "organization_id": "org_1", "updated_at": ts(1, 3), **{f.name: None for f in TYPED if f.name not in
                                                                       ("id", "organization_id", "updated_at")}},
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_staged_type_round_trips_exactly(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        config = _config(tmp_path, kind, TYPED_ROWS, schema=TYPED)
        outcome = run(config, "2024-01-01", scheduled=False)
        assert outcome.record.rows_transferred == 3
        assert _rows(Target(config)) == TYPED_ROWS
        run(config, "2024-01-01", scheduled=False)  # a second write of the same rows changes nothing
        assert _rows(Target(config)) == TYPED_ROWS

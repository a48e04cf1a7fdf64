"""Source schema changes × destination kinds beyond the conformance suite's (widening and added/dropped
columns live in ``incsync_tests/destinations/conformance/test_schema.py``): a change
that is no widening (one clear error, then a full refresh with the new schema). Real Delta tables,
PostgreSQL and object storage, fed by the lake source (Parquet files) without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync.errors import SchemaError
from incsync_tests.destinations.conformance.kinds import BY_NAME, named
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import MATRIX_KINDS, Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, ts, write_table
from incsync_tests.support.schema_change import BASE, BIG
from incsync_tests.support.schema_change import row as _row
from incsync_tests.support.schema_change import set_type as _set


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


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


def _type(target: Target, column: str) -> str:
    """The column's type as the destination stores it."""
    if target.kind == "postgres":
        with target.destination.connect() as conn:
            return target.destination._columns(conn, "orders")[column]
    return str(target.destination.read_rows(model=target.model, recipient=target.recipient).schema.field(column).type)


def _wide(kind: str) -> str:
    return BY_NAME[kind].wide_int_type


def test_delta_widening_is_one_overwrite_commit_holding_the_record(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    config = _config(tmp_path, "delta", [_row(1, 1), _row(2, 2)])
    run(config, "2024-01-01", scheduled=False)
    path = tmp_path / "out" / "acme" / "orders"
    before = DeltaTable(str(path)).version()
    write_table(tmp_path / "src", "orders", [_row(1, 1), _row(2, 1, qty=BIG), _row(3, 3)],
                schema=_set(BASE, "qty", pa.int64()))
    outcome = run(config, "2024-01-01", scheduled=True)
    dt = DeltaTable(str(path))
    assert dt.version() == before + 1
    [commit] = dt.history(1)
    assert commit["operation"] == "WRITE" and commit["operationParameters"]["mode"] == "Overwrite"
    assert commit["incsync.transfer"] == outcome.record.to_json()
    # Row 2's batch version is older than the table's: the table's row stays, as a MERGE would keep it.
    assert [(r["id"], r["qty"], r["updated_at"]) for r in DeltaTable(str(path)).to_pyarrow_table().sort_by("id").to_pylist()] == [
        (1, 1, ts(1, 1)), (2, 1, ts(1, 2)), (3, 1, ts(1, 3))]


def test_longer_text_needs_no_change_and_varchar_widens_to_text(kind: str, tmp_path: Path) -> None:
    config = _config(tmp_path, kind, [_row(1, 1, code="short")])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    if kind == "postgres":  # a destination table typed after a source varchar(10)
        with target.destination.connect() as conn:
            conn.execute("ALTER TABLE acme.orders ALTER COLUMN code TYPE varchar(10)")
            conn.commit()
    write_table(tmp_path / "src", "orders", [_row(1, 1, code="short"), _row(2, 2, code="x" * 300)], schema=BASE)
    outcome = run(config, "2024-01-01", scheduled=True)
    if kind == "postgres":
        assert outcome.destination_metadata["schema_change"] == "widened code character varying(10)→text"
        assert _type(target, "code") == "text"
    else:
        assert "schema_change" not in outcome.destination_metadata
    assert [r["code"] for r in _rows(target)] == ["short", "x" * 300]


def test_a_change_that_is_no_widening_is_one_clear_error_then_a_full_refresh(kind: str, tmp_path: Path) -> None:
    config = _config(tmp_path, kind, [_row(1, 1, code="a")])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = (target.state(), _rows(target))
    changed = _set(BASE, "code", pa.int64())
    write_table(tmp_path / "src", "orders", [_row(1, 1, code=10), _row(2, 2, code=20)], schema=changed)
    with pytest.raises(SchemaError) as caught:
        run(config, "2024-01-01", scheduled=True)
    old, where = BY_NAME[kind].text_type, named(BY_NAME[kind].table_where, kind, tmp_path / "out" / "acme")
    assert str(caught.value) == (
        f"model orders, recipient acme: the source changed a column's type in a way {where} cannot hold in place "
        f"(column code is {old} in {where} but bigint in the source); nothing was published. Fix: reload the "
        "recipient with the new type (incsync transfer orders --recipient acme --full-refresh), or cast the column "
        "back to its old type in the model's source_query."
    )
    assert (target.state(), _rows(target)) == before  # readers still combine everything committed

    outcome = run(config, "2024-01-01", scheduled=False, full_refresh=True)
    assert outcome.destination_metadata["schema_change"] == f"replaced code {old}→bigint (full refresh)"
    assert [(r["id"], r["code"]) for r in _rows(target)] == [(1, 10), (2, 20)]
    assert _type(target, "code") in ("bigint", "int64")
    run(config, "2024-01-01", scheduled=True)
    assert [(r["id"], r["code"]) for r in _rows(target)] == [(1, 10), (2, 20)]


def test_delta_widening_with_a_dropped_column_keeps_replaced_rows_values_like_a_merge(tmp_path: Path) -> None:
    config = _config(tmp_path, "delta", [_row(1, 1, code="a"), _row(2, 2, code="b")])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    wider = _set(BASE, "qty", pa.int64())
    evolved = wider.remove(wider.get_field_index("code"))
    rows = [{k: v for k, v in r.items() if k != "code"} for r in (_row(2, 3, qty=BIG), _row(3, 4, qty=2))]
    write_table(tmp_path / "src", "orders", rows, schema=evolved)
    outcome = run(config, "2024-01-01", scheduled=True)
    assert outcome.destination_metadata["schema_drift"] == "dropped code; changed qty integer→bigint"
    assert [(r["id"], r["code"], r["qty"]) for r in _rows(target)] == [(1, "a", 1), (2, "b", BIG), (3, None, 2)]


def test_validate_connect_drift_line_for_each_destination(kind: str, tmp_path: Path) -> None:
    from incsync.cli.drift import describe

    config = _config(tmp_path, kind, [_row(1, 1)])
    target = Target(config)
    staged = _set(BASE, "code", pa.int64()).append(pa.field("note", pa.string()))
    assert target.destination.drift(model=target.model, recipient=target.recipient, staged=staged) is None
    run(config, "2024-01-01", scheduled=False)
    diff = target.destination.drift(model=target.model, recipient=target.recipient, staged=staged)
    old = note = BY_NAME[kind].text_type
    assert describe(diff, model=target.model, recipient=target.recipient) == (
        f"models.orders (recipient acme): source schema drift: added note {note}; changed code {old}→bigint; the next "
        "transfer fails until a full refresh (incsync transfer orders --recipient acme --full-refresh)"
    )


def test_a_widening_killed_before_its_commit_changes_nothing(kind: str, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from incsync.core.crashpoints import CRASH_ENV

    config = _config(tmp_path, kind, [_row(1, 1, qty=7)])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = (target.state(), _rows(target), _type(target, "qty"))
    write_table(tmp_path / "src", "orders", [_row(1, 1, qty=7), _row(2, 2, qty=BIG)], schema=_set(BASE, "qty", pa.int64()))
    proc = subprocess.run(
        [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(config), "2024-01-01", "--scheduled"],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, CRASH_ENV: "mid_publish"},
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (target.state(), _rows(target)) == before[:2]
    # MariaDB commits DDL by itself: the column was widened before the transaction (docs/schema-changes.md).
    assert _type(target, "qty") == (_wide(kind) if BY_NAME[kind].ddl_commits_itself else before[2])
    run(config, "2024-01-01", scheduled=True)
    assert [(r["id"], r["qty"]) for r in _rows(target)] == [(1, 7), (2, BIG)]
    assert _type(target, "qty") == _wide(kind)


def test_object_storage_manifests_from_before_reader_schema_still_combine(tmp_path: Path) -> None:
    import json

    config = _config(tmp_path, "object_storage", [_row(1, 1, code="a", qty=7)])
    run(config, "2024-01-01", scheduled=False)
    [path] = (tmp_path / "out" / "acme" / "_manifests").rglob("manifest_*.json")
    manifest = json.loads(path.read_text())
    del manifest["reader_schema"]  # as written before this key existed
    path.write_text(json.dumps(manifest))
    target = Target(config)

    write_table(tmp_path / "src", "orders", [_row(1, 1, code=1)], schema=_set(BASE, "code", pa.int64()))
    with pytest.raises(SchemaError, match="column code is string in"):
        run(config, "2024-01-01", scheduled=True)
    write_table(tmp_path / "src", "orders", [_row(1, 1, qty=7), _row(2, 2, qty=BIG)], schema=_set(BASE, "qty", pa.int64()))
    outcome = run(config, "2024-01-01", scheduled=True)
    assert outcome.destination_metadata["schema_change"] == "widened qty integer→bigint"
    assert [(r["id"], r["qty"]) for r in _rows(target)] == [(1, 7), (2, BIG)]

"""The same behaviour from every destination kind, through Dagster and Spark as users run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync.config.tags import FULL_REFRESH_TAG, MODE_TAG
from incsync.orchestration.definitions import build_definitions
from incsync_tests.destinations.conformance.kinds import BY_NAME
from incsync_tests.support.destinations import MATRIX_KINDS, Target, destination_env, destination_spec
from incsync_tests.support.lake import ORDERS_SCHEMA, lake_config, latest_metadata, materialize_partition, order, ts, write_table

LOOKBACK = 60
ACME = [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}]


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, spark) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


def _configure(root: Path, kind: str, **model: Any) -> Path:
    return lake_config(root, recipients=ACME, destinations=[destination_spec(kind)], model={"lookback_seconds": LOOKBACK, **model})


def _run(config: Path, instance: Any, window: str, **kwargs: Any):
    return materialize_partition(build_definitions(config), instance, window=window, recipient="acme", **kwargs)


def _org1(rows: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    picked = [{k: v for k, v in r.items() if k not in drop} for r in rows if r["organization_id"] == "org_1"]
    return sorted(picked, key=lambda r: r["id"])


SOURCE = [
    order(1, "org_1", ts(1, 1)),
    order(2, "org_1", ts(1, 2)),
    order(3, "org_2", ts(1, 3)),
    order(4, "org_1", ts(2, 10), amount=4.0),
    order(5, "org_2", ts(2, 11)),
]


def test_backfill_incremental_and_replay(kind: str, tmp_path: Path, dagster_instance) -> None:
    src = tmp_path / "src"
    write_table(src, "orders", SOURCE)
    config = _configure(tmp_path, kind)
    target = Target(config)

    for window in ("2024-01-01", "2024-01-02"):
        _run(config, dagster_instance, window)
    assert target.rows() == _org1(SOURCE)
    assert target.high_watermark() == ts(2, 10)
    meta = latest_metadata(dagster_instance)
    assert (meta["rows_transferred"], meta["delta_rows_transferred"], meta["transfer_type"]) == (1, 1, "INCREMENTAL")

    changed = [*SOURCE, order(6, "org_1", ts(2, 20)), order(7, "org_2", ts(2, 20))]
    changed[1] = order(2, "org_1", ts(2, 21), status="paid", amount=2.5)
    write_table(src, "orders", changed)
    _run(config, dagster_instance, "2024-01-02", tags={MODE_TAG: "incremental"})
    meta = latest_metadata(dagster_instance)
    assert meta["lower_bound"] == ts(2, 9, 59).timestamp()
    assert (meta["rows_transferred"], meta["delta_rows_transferred"]) == (3, 2)  # 4 (lookback overlap), 6, 2
    assert target.rows() == _org1(changed)
    assert target.high_watermark() == ts(2, 21)

    # A lagging source replays an old version of row 2: newer data is never overwritten, the HW never moves back.
    stale = [*changed]
    stale[1] = order(2, "org_1", ts(1, 2))
    write_table(src, "orders", stale)
    _run(config, dagster_instance, "2024-01-01")
    assert latest_metadata(dagster_instance)["rows_transferred"] == 2
    assert target.rows() == _org1(changed)
    assert target.high_watermark() == ts(2, 21)
    _run(config, dagster_instance, "2024-01-01")
    assert target.rows() == _org1(changed)


def test_empty_window_records_the_transfer(kind: str, tmp_path: Path, dagster_instance) -> None:
    write_table(tmp_path / "src", "orders", SOURCE)
    config = _configure(tmp_path, kind)
    target = Target(config)
    _run(config, dagster_instance, "2024-01-02")
    before = target.rows()

    _run(config, dagster_instance, "2024-01-05")
    meta = latest_metadata(dagster_instance)
    assert (meta["rows_transferred"], meta["delta_rows_transferred"]) == (0, 0)
    assert meta["high_watermark_epoch_seconds"] == int(ts(2, 10).timestamp())
    state = target.state()
    assert state.last_transfer is not None and state.last_transfer.transfer_id == meta["transfer_id"]
    assert state.high_watermark == ts(2, 10)
    assert target.rows() == before == _org1([r for r in SOURCE if r["updated_at"] >= ts(2)])


def test_duplicate_key_publishes_nothing(kind: str, tmp_path: Path, dagster_instance) -> None:
    write_table(tmp_path / "src", "orders", SOURCE)
    config = _configure(tmp_path, kind)
    target = Target(config)
    _run(config, dagster_instance, "2024-01-02")
    before_rows, before_state = target.raw_rows(), target.state()

    write_table(tmp_path / "src", "orders", [*SOURCE, order(1, "org_1", ts(1, 5)), order(9, "org_1", ts(1, 6))])
    result = _run(config, dagster_instance, "2024-01-01", raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    error, message = failure.step_failure_data.error, ""
    while error is not None:
        message, error = message + error.message, error.cause
    assert "model orders, recipient acme: 1 primary key value(s) (id) occur more than once in the batch: (1)" in message
    assert "nothing was published" in message
    assert target.raw_rows() == before_rows
    assert target.state() == before_state


def _pg_oid(target: Target) -> int | str | None:
    """The table's identity where a kind keeps one through a full refresh: PostgreSQL's oid, Iceberg's table UUID."""
    if target.kind == "iceberg":
        return str(target.destination.table(target.model).metadata.table_uuid)
    if target.kind != "postgres":
        return None
    with target.destination.connect() as conn:
        return conn.execute("SELECT 'acme.orders'::regclass::oid").fetchone()[0]


def test_full_refresh_and_model_change(kind: str, tmp_path: Path, dagster_instance) -> None:
    src = tmp_path / "src"
    write_table(src, "orders", SOURCE)
    config = _configure(tmp_path, kind)
    target = Target(config)
    for window in ("2024-01-01", "2024-01-02"):
        _run(config, dagster_instance, window)
    oid = _pg_oid(target)

    # Row 2 is deleted at the source; only a full refresh removes it from the destination.
    current = [r for r in SOURCE if r["id"] != 2]
    write_table(src, "orders", current)
    _run(config, dagster_instance, "2024-01-02", tags={FULL_REFRESH_TAG: "true"})
    meta = latest_metadata(dagster_instance)
    # Jan 2's own row (the full refresh marks Jan 1 too, with its row: docs/design.md#the-partition-view), the commit's record
    assert (meta["transfer_type"], meta["full_refresh_reason"], meta["rows_transferred"]) == ("FULL_REFRESH", "requested", 1)
    assert meta["lower_bound"] == ts(1).timestamp()
    assert target.raw_rows() == _org1(current)
    assert _pg_oid(target) == oid  # the contents were replaced, never the table
    assert (target.state().last_transfer.transfer_type, target.state().last_transfer.rows_transferred) == ("FULL_REFRESH", 2)

    # The model drops a column: its fingerprint changes, so the next transfer is a full refresh.
    config = _configure(tmp_path, kind, columns=["id", "organization_id", "status", "updated_at"])
    target = Target(config)
    _run(config, dagster_instance, "2024-01-02")
    meta = latest_metadata(dagster_instance)
    assert meta["transfer_type"] == "FULL_REFRESH"
    assert meta["full_refresh_reason"].startswith("model_changed (")
    if BY_NAME[kind].refresh_keeps_table:  # its identity and the column (a recipient's view may use it), emptied
        assert target.raw_rows() == [{**r, "amount": None} for r in _org1(current)]
        assert _pg_oid(target) == oid
    else:
        assert target.raw_rows() == _org1(current, drop=("amount",))
    assert target.state().last_transfer.extra["full_refresh_reason"] == meta["full_refresh_reason"]

    _run(config, dagster_instance, "2024-01-02")
    assert latest_metadata(dagster_instance)["transfer_type"] == "INCREMENTAL"


NOTE_SCHEMA = ORDERS_SCHEMA.append(pa.field("note", pa.string()))


def test_added_source_column_reaches_the_destination(kind: str, tmp_path: Path, dagster_instance) -> None:
    src = tmp_path / "src"
    write_table(src, "orders", SOURCE)
    config = _configure(tmp_path, kind, columns=None)  # every source column
    target = Target(config)
    _run(config, dagster_instance, "2024-01-01")

    evolved = [{**r, "note": f"n{r['id']}"} for r in SOURCE] + [{**order(8, "org_1", ts(2, 12)), "note": "gift"}]
    write_table(src, "orders", evolved, schema=NOTE_SCHEMA)
    _run(config, dagster_instance, "2024-01-02")
    assert latest_metadata(dagster_instance)["transfer_type"] == "INCREMENTAL"
    expected = [{**r, "note": None if r["updated_at"] < ts(2) else r["note"]} for r in _org1(evolved)]
    assert target.rows() == expected

"""Lake source → Delta destination through real Dagster materializations: rows, metadata, idempotence."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from incsync.destinations.base import TransferRecord
from incsync.destinations.delta.state import RECORD_KEY
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import (
    delta_rows,
    lake_config,
    latest_metadata,
    materialize_partition,
    order,
    ts,
    write_table,
)

TWO_TENANTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]


@pytest.fixture
def project(tmp_path: Path, spark) -> Path:
    """Two tenants' orders over Jan 1-3 2024, one lake table, a Delta destination per recipient."""
    write_table(
        tmp_path / "src",
        "orders",
        [
            order(1, "org_1", ts(1, 1)),
            order(2, "org_1", ts(1, 23, 59, 59, 999_999)),
            order(3, "org_1", ts(2)),  # exactly on the boundary: belongs to Jan 2
            order(4, "org_1", ts(2, 12, 0, 0, 250_000)),
            order(5, "org_2", ts(1, 2)),
            order(6, "org_2", ts(2, 3)),
            order(7, "org_1", ts(3, 8)),
        ],
    )
    return lake_config(tmp_path, recipients=TWO_TENANTS)


def _run(project: Path, instance, window: str, recipient: str = "acme", **kwargs) -> dg.ExecuteInProcessResult:
    return materialize_partition(build_definitions(project), instance, window=window, recipient=recipient, **kwargs)


def _ids(path: Path) -> list[int]:
    return [r["id"] for r in delta_rows(path)]


def test_first_window_exact_rows_and_metadata(project: Path, dagster_instance) -> None:
    result = _run(project, dagster_instance, "2024-01-01")
    assert result.success
    rows = delta_rows(project.parent / "out" / "acme" / "orders")
    assert rows == [
        {"id": 1, "organization_id": "org_1", "status": "new", "amount": 1.0, "updated_at": ts(1, 1)},
        {"id": 2, "organization_id": "org_1", "status": "new", "amount": 1.0, "updated_at": ts(1, 23, 59, 59, 999_999)},
    ]
    md = latest_metadata(dagster_instance)
    transfer_id = md.pop("transfer_id")
    duration = md.pop("duration_seconds")
    staged = md.pop("staged_bytes")
    assert duration > 0 and staged > 0 and len(transfer_id) == 29
    schema = md.pop("dagster/column_schema")
    source_horizon = md.pop("source_horizon")  # a lake source: the extraction's start by this machine's clock
    assert abs(source_horizon - time.time()) < 120
    assert [(c.name, c.type) for c in schema.columns] == [
        ("id", "int64"), ("organization_id", "string"), ("status", "string"), ("amount", "double"),
        ("updated_at", "timestamp[us, tz=UTC]"),
    ]
    assert md == {
        "rows_transferred": 2,
        "delta_rows_transferred": 2,
        "high_watermark": ts(1, 23, 59, 59, 999_999).timestamp(),
        "high_watermark_epoch_seconds": int(ts(1, 23, 59, 59).timestamp()),
        "high_watermark_exact": "2024-01-01T23:59:59.999999+00:00",
        "dagster/row_count": 2,
        "destination_path": str(project.parent / "out" / "acme" / "orders"),
        "window_start": ts(1).timestamp(),
        "window_end": ts(2).timestamp(),
        "lower_bound": ts(1).timestamp(),  # first window: no lookback below the start
        "upper_bound": ts(2).timestamp(),
        "lookback_seconds": 300,
        "transfer_type": "INCREMENTAL",
        "destination": "acme_delta",
        "recipient": "acme",
        "delta_table_version": 1,  # version 0 is the owner stamp's commit
        "delta_table_path": str(project.parent / "out" / "acme" / "orders"),
        "destination_owner": "acme",
        "delta_files_removed": 0,  # the first transfer rewrites nothing; its one file is all it adds
        "delta_bytes_removed": 0,
        "delta_files_added": 1,
        "delta_bytes_added": sum(pa.table(DeltaTable(str(project.parent / "out" / "acme" / "orders")).get_add_actions())
                                 .column("size_bytes").to_pylist()),
        "horizon": "lookback-only",
        "horizon_held_back_seconds": 0.0,
        "future_dated_rows": 0,
    }
    history = DeltaTable(str(project.parent / "out" / "acme" / "orders")).history(1)[0]
    record = TransferRecord.from_json(history[RECORD_KEY])
    assert (record.transfer_id, record.high_watermark, record.rows_transferred) == (transfer_id, ts(1, 23, 59, 59, 999_999), 2)


def test_second_window_counts_lookback_overlap_and_is_idempotent(project: Path, dagster_instance) -> None:
    _run(project, dagster_instance, "2024-01-01")
    table = project.parent / "out" / "acme" / "orders"
    for attempt in range(2):
        assert _run(project, dagster_instance, "2024-01-02").success
        md = latest_metadata(dagster_instance)
        # [Jan 2 - 300 s, Jan 3) holds rows 2 (lookback overlap), 3 and 4.
        assert md["rows_transferred"] == 3
        assert md["lower_bound"] == ts(1, 23, 55).timestamp()
        # Rows newer than the previous HW in epoch seconds (floored): first run 3 and 4 (and 2, whose
        # sub-second part lies above the floored HW); the replay: only row 4's fraction above 12:00:00.
        assert md["delta_rows_transferred"] == (3 if attempt == 0 else 1)
        assert md["high_watermark"] == ts(2, 12, 0, 0, 250_000).timestamp()
        assert _ids(table) == [1, 2, 3, 4]
    assert [r["updated_at"] for r in delta_rows(table)][-1] == ts(2, 12, 0, 0, 250_000)


def test_no_row_of_another_tenant(project: Path, dagster_instance) -> None:
    for window in ("2024-01-01", "2024-01-02", "2024-01-03"):
        assert _run(project, dagster_instance, window, recipient="globex").success
    rows = delta_rows(project.parent / "out" / "globex" / "orders")
    assert [(r["id"], r["organization_id"]) for r in rows] == [(5, "org_2"), (6, "org_2")]
    assert not (project.parent / "out" / "acme").exists()


def test_replaying_an_older_window_never_overwrites_newer_rows(project: Path, dagster_instance, tmp_path: Path) -> None:
    _run(project, dagster_instance, "2024-01-01")
    # Row 1 moves forward into Jan 3 with a new status; transfer Jan 3, then replay Jan 1 from an old snapshot.
    old = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 23, 59, 59, 999_999))]
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(3, 9), status="paid"), old[1]])
    _run(project, dagster_instance, "2024-01-03")
    write_table(tmp_path / "src", "orders", old)  # a lagging replica still serves the old version
    assert _run(project, dagster_instance, "2024-01-01").success
    rows = delta_rows(project.parent / "out" / "acme" / "orders")
    assert [(r["id"], r["status"], r["updated_at"]) for r in rows] == [
        (1, "paid", ts(3, 9)),
        (2, "new", ts(1, 23, 59, 59, 999_999)),
    ]
    md = latest_metadata(dagster_instance)
    assert (md["rows_transferred"], md["delta_rows_transferred"], md["high_watermark"]) == (2, 0, ts(3, 9).timestamp())


def test_equal_last_modified_replaces(project: Path, dagster_instance, tmp_path: Path) -> None:
    _run(project, dagster_instance, "2024-01-01")
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1), status="corrected")])
    _run(project, dagster_instance, "2024-01-01")
    assert delta_rows(project.parent / "out" / "acme" / "orders")[0]["status"] == "corrected"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [order(1, "org_1", ts(1, 1)), order(1, "org_1", ts(1, 2)), order(9, "org_1", ts(1, 3)), order(9, "org_1", ts(1, 4))],
            "model orders, recipient acme: 2 primary key value(s) (id) occur more than once in the batch: (1), (9); "
            "nothing was published. Fix the source or choose a primary_key that is unique.",
        ),
        (
            [order(None, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2))],
            "model orders, recipient acme: 1 row(s) have a NULL primary key (id) (e.g. (None)); nothing was "
            "published. Fix the source rows or the model's primary_key.",
        ),
    ],
    ids=["duplicate-key", "null-key"],
)
def test_invalid_batch_fails_and_changes_nothing(project: Path, dagster_instance, tmp_path: Path, rows, message) -> None:
    _run(project, dagster_instance, "2024-01-01")
    table = project.parent / "out" / "acme" / "orders"
    before = (DeltaTable(str(table)).version(), delta_rows(table))
    write_table(tmp_path / "src", "orders", rows)
    result = _run(project, dagster_instance, "2024-01-01", raise_on_error=False)
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    while failure.cause is not None and failure.cls_name != "ValidationError":
        failure = failure.cause
    assert failure.cls_name == "ValidationError"
    assert failure.message.strip() == f"incsync.errors.ValidationError: {message}"
    assert (DeltaTable(str(table)).version(), delta_rows(table)) == before
    assert not any((tmp_path / "staging").glob("*")), "staging is removed after a failure"


def test_null_last_modified_fails_naming_the_keys(project: Path, dagster_instance, tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(7, "org_1", None), order(8, "org_2", None)])
    result = _run(project, dagster_instance, "2024-01-01", raise_on_error=False)
    assert not result.success
    error = result.get_step_failure_events()[0].step_failure_data.error.to_string()
    assert (
        "model orders, recipient acme: 1 row(s) have a NULL last-modified column updated_at (keys (7)); nothing was "
        "published. Fix the source rows or the model." in error
    )
    assert not (tmp_path / "out" / "acme" / "orders").exists()


def test_empty_window_records_the_transfer(project: Path, dagster_instance) -> None:
    _run(project, dagster_instance, "2024-01-01")
    table = project.parent / "out" / "acme" / "orders"
    version = DeltaTable(str(table)).version()
    _run(project, dagster_instance, "2024-01-05")
    md = latest_metadata(dagster_instance)
    assert (md["rows_transferred"], md["delta_rows_transferred"]) == (0, 0)
    assert md["high_watermark"] == ts(1, 23, 59, 59, 999_999).timestamp(), "an empty window leaves the HW as it was"
    assert DeltaTable(str(table)).version() == version + 1, "the transfer is recorded in a commit of its own"
    assert _ids(table) == [1, 2]


def test_scheduled_repeat_run_reads_from_the_watermark(project: Path, dagster_instance, tmp_path: Path) -> None:
    _run(project, dagster_instance, "2024-01-01")
    _run(project, dagster_instance, "2024-01-02")  # HW 2024-01-02 12:00:00.25
    write_table(
        tmp_path / "src", "orders",
        [order(3, "org_1", ts(2)), order(4, "org_1", ts(2, 12, 0, 0, 250_000)),
         order(8, "org_1", ts(2, 11, 58)), order(10, "org_1", ts(2, 13), status="late")],
    )
    _run(project, dagster_instance, "2024-01-02", tags={"incsync/mode": "incremental"})
    md = latest_metadata(dagster_instance)
    assert md["lower_bound"] == ts(2, 11, 55).timestamp()  # floor(HW) - 300 s
    assert (md["rows_transferred"], md["delta_rows_transferred"]) == (3, 2)  # rows 4, 8, 10; new: 4's fraction and 10
    assert _ids(project.parent / "out" / "acme" / "orders") == [1, 2, 3, 4, 8, 10]


def test_source_query_is_wrapped(tmp_path: Path, dagster_instance, spark) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2), status="test")])
    file = lake_config(tmp_path, model={"source_table": None, "source_query": "SELECT * FROM orders WHERE status <> 'test'"})
    assert _run(file, dagster_instance, "2024-01-01").success
    assert _ids(tmp_path / "out" / "acme" / "orders") == [1]


def test_naive_last_modified_needs_a_zone(tmp_path: Path, dagster_instance, spark) -> None:
    import pyarrow as pa

    naive = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", pa.timestamp("us"))])
    write_table(tmp_path / "src", "orders", [{"id": 1, "organization_id": "org_1", "updated_at": ts(1, 1).replace(tzinfo=None)}], schema=naive)
    file = lake_config(tmp_path, model={"columns": ["id", "organization_id", "updated_at"]})
    result = _run(file, dagster_instance, "2024-01-01", raise_on_error=False)
    assert not result.success
    error = result.get_step_failure_events()[0].step_failure_data.error
    assert 'last_modified_column "updated_at" is a timestamp without time zone; declare the zone it is written in with `last_modified_timezone`' in str(error.to_string())
    file = lake_config(tmp_path, model={"columns": ["id", "organization_id", "updated_at"], "last_modified_timezone": "America/New_York"})
    assert _run(file, dagster_instance, "2024-01-01").success
    assert delta_rows(tmp_path / "out" / "acme" / "orders")[0]["updated_at"] == ts(1, 6)

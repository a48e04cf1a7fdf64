"""The places incremental syncs lose or duplicate rows, one deterministic test each.

Each test drives a real lake source (Parquet written with pyarrow, read by Spark) into a real Delta
table through the transfer engine (``run_transfer``, the code the IO manager runs); one goes through
Dagster. Times are UTC unless a test says otherwise.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from incsync.config.load import load_config
from incsync.config.tags import MODE_TAG
from incsync.core.windows import window_key_for
from incsync.destinations.registry import build_destination
from incsync.errors import SchemaError, ValidationError
from incsync.sources.registry import build_source
from incsync.transfer.execute import run_transfer
from incsync.transfer.request import TransferOutcome, TransferRun
from incsync_tests.support.lake import JAN1_EPOCH, ORDERS_SCHEMA, lake_config, latest_metadata, materialize_partition, order, ts

UTC = timezone.utc


class Lake:
    """One lake table ``orders`` and one recipient ``acme`` (org_1) with a Delta destination."""

    def __init__(self, root: Path, spark: Any, *, model: dict[str, Any] | None = None, lookback: int = 300):
        self.root, self.spark = root, spark
        self.config_path = lake_config(root, model=model, source={"lookback_seconds": lookback})
        self.config = load_config(self.config_path)
        self.model = self.config.models[0]
        self.recipient = self.config.recipients[0]
        self.destination = build_destination(self.config.destination(self.recipient.destination))
        self.staging = Path(os.environ["INCSYNC_STAGING_DIR"])
        self.table_path = root / "out" / "acme" / "orders"
        self.file_no = 0

    def write(self, rows: list[dict[str, Any]], schema: pa.Schema = ORDERS_SCHEMA) -> None:
        folder = self.root / "src" / "orders"
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.parquet"):
            old.unlink()
        self.file_no += 1
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / f"part-{self.file_no}.parquet")

    def run(self, window: datetime, *, scheduled: bool = False) -> TransferOutcome:
        key = window_key_for(self.model, window)
        request = TransferRun.for_model(
            self.config, self.model, source=build_source(self.config.source("lake")), spark=lambda: self.spark, scheduled=scheduled,
        ).request(self.recipient, self.destination, key)
        outcome = run_transfer(request, staging_root=self.staging)
        assert not list(self.staging.glob("*")), "staging must be removed after the transfer"
        return outcome

    def rows(self) -> list[dict[str, Any]]:
        return DeltaTable(str(self.table_path)).to_pyarrow_table().sort_by("id").to_pylist()

    def ids(self) -> list[int]:
        return [r["id"] for r in self.rows()]

    def snapshot(self) -> tuple[int, list[dict[str, Any]], Any]:
        """Everything a reader can see: table version, rows and the committed transfer record."""
        state = self.destination.read_state(model=self.model, recipient=self.recipient)
        return DeltaTable(str(self.table_path)).version(), self.rows(), state.last_transfer


def counts(outcome: TransferOutcome) -> tuple[int, int, datetime | None]:
    r = outcome.record
    return r.rows_transferred, r.delta_rows_transferred, r.high_watermark


# ---- contract violations: a clear error and nothing published ------------------------------------


def test_null_primary_key_fails_and_publishes_nothing(spark, tmp_path: Path) -> None:
    lake = Lake(tmp_path, spark)
    good = [order(1, "org_1", ts(1, 10)), order(2, "org_2", ts(1, 10))]
    lake.write(good)
    lake.run(ts(1))
    before = lake.snapshot()

    lake.write([*good, order(None, "org_1", ts(1, 11)), order(3, "org_1", ts(1, 11))])  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as info:
        lake.run(ts(1))
    assert str(info.value) == (
        "model orders, recipient acme: 1 row(s) have a NULL primary key (id) (e.g. (None)); "
        "nothing was published. Fix the source rows or the model's primary_key."
    )
    assert lake.snapshot() == before
    assert not list(lake.staging.glob("*"))


def test_null_last_modified_fails_in_every_window_instead_of_vanishing(spark, tmp_path: Path) -> None:
    """Regression: the bounds predicate used to drop NULL last-modified rows, so they were never seen."""
    lake = Lake(tmp_path, spark)
    lake.write([order(1, "org_1", ts(1, 10))])
    lake.run(ts(1))
    before = lake.snapshot()

    lake.write([order(1, "org_1", ts(1, 10)), order(7, "org_1", None), order(8, "org_2", None)])  # type: ignore[arg-type]
    for window, scheduled in ((ts(1), True), (ts(2), False)):  # a NULL fits no window: every window reports it
        with pytest.raises(ValidationError) as info:
            lake.run(window, scheduled=scheduled)
        assert str(info.value) == (
            "model orders, recipient acme: 1 row(s) have a NULL last-modified column updated_at (keys (7)); "
            "nothing was published. Fix the source rows or the model."
        )
    assert lake.snapshot() == before


def test_duplicate_keys_are_named_and_nothing_is_published(spark, tmp_path: Path) -> None:
    lake = Lake(tmp_path, spark)
    rows = [order(i, "org_1", ts(1, 9)) for i in range(1, 21)]
    lake.write(rows)
    lake.run(ts(1))
    before = lake.snapshot()

    dupes = [order(i, "org_1", ts(1, 12), status="twin") for i in (20, 3, 19, 4, 18, 5, 17, 6, 16, 7, 15, 8)]
    lake.write([*rows, *dupes, order(99, "org_2", ts(1, 9)), order(99, "org_2", ts(1, 9))])  # org_2's dupes are not acme's
    with pytest.raises(ValidationError) as info:
        lake.run(ts(1))
    assert str(info.value) == (
        "model orders, recipient acme: 12 primary key value(s) (id) occur more than once in the batch: "
        "(3), (4), (5), (6), (7), (8), (15), (16), (17), (18); nothing was published. "
        "Fix the source or choose a primary_key that is unique."
    )
    assert lake.snapshot() == before


# ---- time zones -----------------------------------------------------------------------------------

NAIVE_SCHEMA = pa.schema([*(f for f in ORDERS_SCHEMA if f.name != "updated_at"), ("updated_at", pa.timestamp("us"))])


def naive(id: int, local: datetime, org: str = "org_1") -> dict[str, Any]:
    return {"id": id, "organization_id": org, "status": "new", "amount": 1.0, "updated_at": local}


def test_timestamp_without_zone_is_rejected_unless_the_model_declares_it(spark, tmp_path: Path) -> None:
    lake = Lake(tmp_path, spark)
    lake.write([naive(1, datetime(2024, 1, 1, 10))], schema=NAIVE_SCHEMA)
    with pytest.raises(SchemaError) as info:
        lake.run(ts(1))
    assert str(info.value) == (
        'model orders: last_modified_column "updated_at" is a timestamp without time zone; '
        "declare the zone it is written in with `last_modified_timezone` (e.g. UTC, Europe/Berlin)"
    )
    assert not lake.table_path.exists(), "nothing may be published"


def test_declared_zone_converts_across_daylight_saving_transitions(spark, tmp_path: Path) -> None:
    """Europe/Berlin wall-clock times land in the UTC window of their instant, DST gaps and folds included."""
    march30 = int(datetime(2024, 3, 30, tzinfo=UTC).timestamp())
    lake = Lake(
        tmp_path, spark, lookback=0,
        model={"last_modified_timezone": "Europe/Berlin", "max_transfer_time_window_seconds": 3600, "min_start_time_epoch": march30},
    )
    rows = [
        naive(1, datetime(2024, 3, 31, 0, 30)),  # CET (+1): 2024-03-30 23:30Z, the day before in UTC
        naive(2, datetime(2024, 3, 31, 1, 59, 59, 999999)),  # last instant before the gap: 00:59:59.999999Z
        naive(3, datetime(2024, 3, 31, 2, 30)),  # inside the spring-forward gap: does not exist, read as 03:30 CEST
        naive(4, datetime(2024, 3, 31, 3, 0)),  # CEST (+2): 01:00Z
        naive(5, datetime(2024, 10, 27, 2, 30)),  # the fall-back fold: read as the first (CEST) 02:30 = 00:30Z
        naive(6, datetime(2024, 10, 27, 3, 0)),  # CET again: 02:00Z
        naive(7, datetime(2024, 10, 27, 1, 30), org="org_2"),
    ]
    lake.write(rows, schema=NAIVE_SCHEMA)
    utc = lambda *a: datetime(*a, tzinfo=UTC)  # noqa: E731
    # Each hourly UTC window gets exactly its rows, nothing from a neighbour.
    expectations = [
        (utc(2024, 3, 30, 23), {1: utc(2024, 3, 30, 23, 30)}),
        (utc(2024, 3, 31, 0), {2: utc(2024, 3, 31, 0, 59, 59, 999999)}),
        (utc(2024, 3, 31, 1), {3: utc(2024, 3, 31, 1, 30), 4: utc(2024, 3, 31, 1, 0)}),
        (utc(2024, 10, 27, 0), {5: utc(2024, 10, 27, 0, 30)}),
        (utc(2024, 10, 27, 1), {}),
        (utc(2024, 10, 27, 2), {6: utc(2024, 10, 27, 2, 0)}),
    ]
    seen: dict[int, datetime] = {}
    for window, want in expectations:
        outcome = lake.run(window)
        assert outcome.record.rows_transferred == len(want), window
        seen.update(want)
        assert {r["id"]: r["updated_at"] for r in lake.rows()} == seen, window
    assert lake.snapshot()[2].high_watermark == utc(2024, 10, 27, 2, 0)


# ---- time itself: the future, empty windows, microseconds, late rows --------------------------------


def test_empty_window_records_the_transfer_and_keeps_the_watermark(spark, tmp_path: Path) -> None:
    lake = Lake(tmp_path, spark)
    lake.write([order(1, "org_1", ts(1, 10, 0, 0, 250_000)), order(2, "org_2", ts(3, 10))])

    first = lake.run(ts(2))  # the very first transfer may be empty: the table exists, no HW yet
    assert counts(first) == (0, 0, None)
    assert lake.rows() == [] and DeltaTable(str(lake.table_path)).version() == 1  # 0: the owner stamp

    lake.run(ts(1))
    version, rows, record = lake.snapshot()
    empty = lake.run(ts(3))  # org_2 has data that day, acme has none
    assert counts(empty) == (0, 0, ts(1, 10, 0, 0, 250_000))
    assert lake.snapshot() == (version + 1, rows, empty.record), "recorded in a commit of its own, rows untouched"
    assert record is not None and empty.record.transfer_id != record.transfer_id


def test_empty_window_through_dagster_reports_the_unchanged_watermark(
    spark, tmp_path: Path, dagster_instance: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Lake(tmp_path, spark)
    monkeypatch.setenv("INCSYNC_CONFIG", str(lake.config_path))  # incsync.definitions loads it on import
    from incsync.definitions import build_definitions

    lake.write([order(1, "org_1", ts(1, 10, 0, 0, 250_000))])
    lake.run(ts(1))
    defs = build_definitions(lake.config_path)
    result = materialize_partition(defs, dagster_instance, window="2024-01-05", recipient="acme", tags={MODE_TAG: "incremental"})
    assert result.success
    meta = latest_metadata(dagster_instance)
    # A scheduled run of windows after the HW reads what changed since it (floor(HW) - lookback): row 1
    # again, counted in the run's first window, and "new" against the HW floored to its second (docs/design.md#counts).
    assert (meta["rows_transferred"], meta["delta_rows_transferred"]) == (1, 1)
    assert meta["high_watermark"] == ts(1, 10, 0, 0, 250_000).timestamp()
    assert meta["high_watermark_epoch_seconds"] == JAN1_EPOCH + 36_000
    assert (meta["window_start"], meta["lower_bound"]) == (ts(5).timestamp(), ts(1, 9, 55).timestamp())
    assert [r["id"] for r in lake.rows()] == [1]


def test_microseconds_round_trip_and_window_edges(spark, tmp_path: Path) -> None:
    """µs survive source → staging → Delta; a row exactly on a window's end belongs to the next window."""
    lake = Lake(tmp_path, spark, lookback=0)
    values = {
        1: ts(1, 0, 0, 0, 0),  # exactly the window start (inclusive)
        2: ts(1, 0, 0, 0, 1),
        3: ts(1, 12, 30, 15, 500_000),
        4: ts(1, 23, 59, 59, 999_999),  # the last µs of the window
        5: ts(2, 0, 0, 0, 0),  # exactly the window end (exclusive): next window
    }
    lake.write([order(k, "org_1", v) for k, v in values.items()])

    day1 = lake.run(ts(1))
    assert counts(day1) == (4, 4, values[4])
    assert day1.record.high_watermark_micros == (JAN1_EPOCH + 86_399) * 1_000_000 + 999_999
    assert {r["id"]: r["updated_at"] for r in lake.rows()} == {k: values[k] for k in (1, 2, 3, 4)}
    assert DeltaTable(str(lake.table_path)).schema().to_arrow().field("updated_at").type == pa.timestamp("us", tz="UTC")

    day2 = lake.run(ts(2))
    # delta counts compare against the HW floored to the second (23:59:59): row 4 is not "new" again, row 5 is
    assert counts(day2) == (1, 1, values[5])
    assert {r["id"]: r["updated_at"] for r in lake.rows()} == values


def test_rows_sharing_the_watermark_timestamp_are_not_skipped(spark, tmp_path: Path) -> None:
    """Rows that arrive after a run with exactly the HW's timestamp are caught: the lower bound is floor(HW) - lookback."""
    lake = Lake(tmp_path, spark)
    shared, sub = ts(2, 10), ts(2, 11, 0, 0, 400_000)
    first = [order(i, "org_1", shared) for i in range(1, 101)]
    lake.write(first)
    assert counts(lake.run(ts(2), scheduled=True)) == (100, 100, shared)

    lake.write([*first, *(order(i, "org_1", shared) for i in range(101, 151))])
    # 150 rows read, but none is "delta": their last-modified equals the whole-second HW, not greater
    assert counts(lake.run(ts(2), scheduled=True)) == (150, 0, shared)
    assert lake.ids() == list(range(1, 151))

    more = [order(i, "org_1", sub) for i in range(151, 161)]
    lake.write([*first, *(order(i, "org_1", shared) for i in range(101, 151)), *more])
    assert counts(lake.run(ts(2), scheduled=True)) == (160, 10, sub)  # still from floor(10:00) - 5 min: all re-read
    lake.write([*first, *(order(i, "org_1", shared) for i in range(101, 151)), *more, order(161, "org_1", sub)])
    # now from 10:55; a sub-second HW floors to 11:00:00, so the rows at 11:00:00.4 count as new again
    # (never skipped, sometimes recounted)
    assert counts(lake.run(ts(2), scheduled=True)) == (11, 11, sub)
    assert lake.ids() == list(range(1, 162))


def test_late_rows_inside_the_lookback_are_caught_and_beyond_it_missed(spark, tmp_path: Path) -> None:
    """The known limit of every lookback-based sync, written down: a scheduled run re-reads only
    ``lookback`` seconds below the watermark, so a row that shows up later than that is missed until its
    window is backfilled (a full-window run)."""
    lake = Lake(tmp_path, spark, lookback=300)
    hw = ts(2, 10, 0, 0, 500_000)
    base = [order(1, "org_1", hw)]
    lake.write(base)
    assert counts(lake.run(ts(2), scheduled=True)) == (1, 1, hw)

    inside = order(2, "org_1", ts(2, 9, 55, 0))  # exactly floor(HW) - lookback: the lower bound, inclusive
    beyond = order(3, "org_1", ts(2, 9, 54, 59, 999_999))  # 1 µs older: outside the re-read
    lake.write([*base, inside, beyond])
    caught = lake.run(ts(2), scheduled=True)
    assert caught.bounds.lower == ts(2, 9, 55)
    # rows 1 (re-read overlap, newer than the floored HW) and 2; row 2 is older than the HW so not "delta"
    assert counts(caught) == (2, 1, hw)
    assert lake.ids() == [1, 2], "row 3 is missed by scheduled runs: the documented limit"

    backfill = lake.run(ts(2))  # the whole window, with lookback below it
    assert backfill.bounds.lower == ts(2) - timedelta(seconds=300)
    assert counts(backfill) == (3, 1, hw)
    assert lake.ids() == [1, 2, 3]


def test_upsert_tie_break_equal_replaces_older_never_does(spark, tmp_path: Path) -> None:
    """A row is replaced only by one with a newer or equal last-modified (docs/design.md#publish, Delta)."""
    lake = Lake(tmp_path, spark)
    t = ts(2, 10, 0, 0, 123_456)
    lake.write([order(1, "org_1", t, status="v1")])
    lake.run(ts(2))
    lake.write([order(1, "org_1", t, status="v2")])  # changed content, same last-modified
    assert counts(lake.run(ts(2))) == (1, 1, t)  # in the floored HW's second: counted as new again
    assert [(r["status"], r["updated_at"]) for r in lake.rows()] == [("v2", t)], "an equal last-modified replaces"

    lake.write([order(1, "org_1", ts(1, 9), status="restored")])  # the source went back in time (a restore)
    version = DeltaTable(str(lake.table_path)).version()
    assert counts(lake.run(ts(1))) == (1, 0, t)  # read, not "delta" (older than the HW), HW unchanged
    assert [(r["status"], r["updated_at"]) for r in lake.rows()] == [("v2", t)], "an older last-modified never replaces"
    assert DeltaTable(str(lake.table_path)).version() == version + 1, "the transfer is still recorded"

"""Performance behaviour that must not change results: the source row probe and the Delta file layout."""

from __future__ import annotations

import logging
from datetime import timedelta

import pyarrow as pa
from deltalake import DeltaTable

from incsync.config.destinations import DeltaDestinationConfig
from incsync.config.load import load_config
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.bounds import Bounds
from incsync.destinations.base import INCREMENTAL, TransferRecord
from incsync.destinations.delta.destination import DeltaDestination
from incsync.destinations.registry import build_destination
from incsync.sources.registry import build_source
from incsync.staging.spark import spark_parquet_schema, stage
from incsync_tests.support.jdbc import jdbc_config, pg_database
from incsync_tests.support.lake import delta_rows, latest_metadata, materialize_partition, ts

MODEL_KEY = ("db", "orders")
ORDERS = """CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, status text, amount numeric(12,2),
            payload jsonb, updated_at timestamptz(6))"""


def bounds(lower, upper) -> Bounds:
    return Bounds(lower=lower, upper=upper, lookback_seconds=0, reason="test")


def test_postgres_row_count_is_an_upper_bound_of_the_read_capped_at_cap_plus_one(tmp_path):
    with pg_database() as db:
        db.execute(ORDERS)
        db.execute(
            "INSERT INTO orders VALUES (1, 'org_1', 'new', 1.00, '{}', %s), (2, 'org_2', 'new', 2.00, '{}', %s)",
            [ts(1, 10), ts(2, 10)],
        )
        config = load_config(jdbc_config(tmp_path, db))
        source, model, recipient = build_source(config.source("db")), config.model("orders"), config.recipient("acme")

        def probe(lower, upper, cap=10):
            return source.count_rows(model=model, recipient=recipient, bounds=bounds(lower, upper), cap=cap)

        assert probe(ts(1), ts(2)) == 1
        assert probe(ts(1, 10), ts(1, 10, 0, 0, 1)) == 1  # lower bound inclusive, to the microsecond
        assert probe(ts(1), ts(1, 10)) == 0  # upper bound exclusive
        assert probe(ts(2), ts(3)) == 0  # only org_2 has a row there
        db.execute("INSERT INTO orders VALUES (3, 'org_1', 'new', 3.00, '{}', NULL)")
        assert probe(ts(2), ts(3)) == 1  # a NULL last-modified row must reach validation
        db.execute("INSERT INTO orders SELECT g, 'org_1', 'new', 1.00, '{}', %s FROM generate_series(10, 29) g", [ts(2, 1)])
        assert (probe(ts(2), ts(3), cap=100), probe(ts(2), ts(3), cap=5)) == (21, 6)  # counted up to cap + 1
        # Anything it cannot answer cheaply and exactly is "don't know", never a count.
        with_options = config.source("db").model_copy(update={"jdbc_url": db.jdbc_url + "?sslmode=disable"})
        assert build_source(with_options).count_rows(model=model, recipient=recipient, bounds=bounds(ts(2), ts(3)), cap=10) is None
        wrong = config.source("db").model_copy(update={"user": "no_such_user_x"})
        assert build_source(wrong).count_rows(model=model, recipient=recipient, bounds=bounds(ts(2), ts(3)), cap=10) is None


def test_empty_window_skips_spark_staging_and_is_still_recorded(spark, dagster_instance, tmp_path, caplog):
    with pg_database() as db:
        db.execute(ORDERS)
        db.execute("INSERT INTO orders VALUES (1, 'org_1', 'new', 1.00, '{\"a\": 1}', %s)", [ts(2, 8)])
        config = jdbc_config(tmp_path, db)
        from incsync.orchestration.definitions import build_definitions

        defs = build_definitions(config)
        caplog.set_level(logging.INFO, logger="incsync.transfer.reads")
        materialize_partition(defs, dagster_instance, window="2024-01-02", recipient="acme", model_key=MODEL_KEY)
        assert "Spark staging skipped" not in caplog.text
        caplog.clear()
        materialize_partition(defs, dagster_instance, window="2024-01-03", recipient="acme", model_key=MODEL_KEY)
        assert "the source has no row in bounds; Spark staging skipped" in caplog.text
        meta = latest_metadata(dagster_instance, MODEL_KEY)
        assert (meta["rows_transferred"], meta["delta_rows_transferred"], meta["staged_bytes"]) == (0, 0, 0)
        loaded = load_config(config)
        state = build_destination(loaded.destination("acme_delta")).read_state(
            model=loaded.model("orders"), recipient=loaded.recipient("acme")
        )
        assert state.last_transfer is not None and state.last_transfer.window_start == "2024-01-03T00:00:00+00:00"
        assert state.high_watermark == ts(2, 8)
        assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out/acme/orders")] == [(1, ts(2, 8))]


def test_empty_batch_schema_is_the_one_spark_writes(spark, tmp_path):
    df = spark.sql(
        """SELECT CAST(1 AS INT) i, CAST(2 AS BIGINT) b, CAST(1.5 AS DECIMAL(12,2)) n, 'x' s, true bo,
                  DATE'2024-01-01' d, TIMESTAMP'2024-01-01 00:00:00' t, TIMESTAMP_NTZ'2024-01-01 00:00:00' ntz,
                  array(1, 2) arr, X'00' by"""
    ).where("i = 0")
    written = stage(df, tmp_path / "spark")
    skipped = stage(df, tmp_path / "skipped", known_empty=True)
    assert (skipped.rows, skipped.files, skipped.bytes) == (0, (), 0)
    assert written.rows == 0
    assert skipped.schema.equals(written.schema) and skipped.schema.equals(spark_parquet_schema(df))
    assert str(skipped.schema.field("t").type) == "timestamp[us, tz=UTC]"


def test_a_collected_small_batch_is_the_batch_spark_writes(spark, tmp_path):
    df = spark.sql(
        """SELECT CAST(id AS INT) i, id b, CAST(id / 7 AS DECIMAL(12,2)) n, CAST(id AS STRING) s, id % 2 = 0 bo,
                  date_add(DATE'2024-01-01', CAST(id AS INT)) d,
                  TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id / 1000.0) t,
                  TIMESTAMP_NTZ'2024-01-01 00:00:00' ntz, array(id, 2) arr, X'00' by,
                  IF(id % 3 = 0, NULL, 'x') maybe
           FROM range(1, 2001)"""
    )
    written = stage(df, tmp_path / "spark")
    collected = stage(df, tmp_path / "collected", collect=True)
    assert (collected.rows, len(collected.files)) == (2000, 1)
    assert collected.schema.equals(written.schema) and collected.schema.equals(spark_parquet_schema(df))
    assert collected.table().sort_by("b").equals(written.table().sort_by("b"))


def test_small_and_large_jdbc_windows_land_the_same_rows(spark, dagster_instance, tmp_path, monkeypatch):
    import incsync.transfer.reads

    with pg_database() as db:
        db.execute(ORDERS)
        db.execute(
            """INSERT INTO orders SELECT g, 'org_1', 'new', g / 7.0, jsonb_build_object('g', g),
                      %s::timestamptz + g * interval '1 second' FROM generate_series(1, 300) g""",
            [ts(2)],
        )
        config = jdbc_config(tmp_path, db)
        from incsync.orchestration.definitions import build_definitions

        defs = build_definitions(config)
        monkeypatch.setattr(incsync.transfer.reads, "COLLECT_MAX_ROWS", 299)  # 300 rows: a Spark write job
        materialize_partition(defs, dagster_instance, window="2024-01-02", recipient="acme", model_key=MODEL_KEY)
        through_spark = delta_rows(tmp_path / "out/acme/orders")
        db.execute("UPDATE orders SET status = 'changed', updated_at = updated_at + interval '1 hour' WHERE id <= 100")
        monkeypatch.setattr(incsync.transfer.reads, "COLLECT_MAX_ROWS", 300)  # the whole window again: collected
        materialize_partition(defs, dagster_instance, window="2024-01-02", recipient="acme", model_key=MODEL_KEY)
        meta = latest_metadata(dagster_instance, MODEL_KEY)
        assert (meta["rows_transferred"], meta["delta_rows_transferred"]) == (300, 100)
        collected = delta_rows(tmp_path / "out/acme/orders")
        assert len(through_spark) == len(collected) == 300
        assert [r for r in collected if r["id"] > 100] == [r for r in through_spark if r["id"] > 100]
        assert {(r["status"], r["updated_at"] - ts(2) - timedelta(seconds=r["id"])) for r in collected if r["id"] <= 100} == {
            ("changed", timedelta(hours=1))
        }


def _orders(ids: range, *, status: str, day: int) -> pa.Table:
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "organization_id": pa.array(["org_1"] * len(ids)),
        "status": pa.array([status] * len(ids)),
        "amount": pa.array([i / 100 for i in ids], pa.float64()),
        "updated_at": pa.array([ts(day) + timedelta(seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
    })


def _record(transfer_id: str, rows: int, hw: int) -> TransferRecord:
    return TransferRecord(
        transfer_id=transfer_id, model_name="orders", recipient_id="acme", window_start="2024-01-01T00:00:00+00:00",
        window_end="2024-01-02T00:00:00+00:00", lower_bound="2024-01-01T00:00:00+00:00",
        upper_bound="2024-01-02T00:00:00+00:00", rows_transferred=rows, delta_rows_transferred=rows,
        high_watermark_micros=hw, transfer_type=INCREMENTAL, fingerprint="f", lookback_seconds=0, committed_at="now",
    )


def test_small_merge_into_a_many_file_table_rewrites_few_files(tmp_path):
    config = DeltaDestinationConfig(name="acme_delta", kind="delta", path=str(tmp_path / "out"), target_file_size=256 << 10)
    destination = DeltaDestination(config)
    model = ModelConfig(model_name="orders", source="db", source_table="orders", primary_key=["id"],
                        last_modified_column="updated_at", organization_column="organization_id", min_start_time_epoch=0)
    recipient = RecipientConfig(id="acme", id_in_provider_system="org_1", destination="acme_delta")

    def publish(table: pa.Table, transfer_id: str) -> None:
        batch = stage(table, tmp_path / transfer_id)
        expected = destination.read_state(model=model, recipient=recipient)
        hw = int(table["updated_at"].cast(pa.int64()).to_pylist()[-1])
        destination.publish(model=model, recipient=recipient, batch=batch, record=_record(transfer_id, table.num_rows, hw),
                            expected=expected)

    publish(_orders(range(1, 200_001), status="new", day=1), "t1")
    dt = DeltaTable(destination.table_path(model))
    files = len(dt.file_uris())
    assert files >= 8, f"the backfill wrote {files} files; the layout should split 200k rows into many"
    assert dt.metadata().configuration["delta.targetFileSize"] == str(256 << 10)

    publish(_orders(range(150_001, 151_001), status="changed", day=2), "t2")  # 0.5% changed, recent keys
    dt = DeltaTable(destination.table_path(model))
    merge = dt.history(1)[0]
    assert merge["operation"] == "MERGE"
    metrics = merge["operationMetrics"]
    assert metrics["num_target_rows_updated"] == 1_000 and metrics["num_target_rows_inserted"] == 0
    assert metrics["num_target_files_removed"] <= 2, metrics
    assert metrics["num_target_rows_copied"] < 200_000 / files * 2, metrics
    rows = dt.to_pyarrow_table(columns=["id", "status"]).sort_by("id")
    assert rows.num_rows == 200_000
    statuses = rows["status"].to_pylist()
    assert statuses[150_000:151_000] == ["changed"] * 1_000
    assert statuses.count("changed") == 1_000

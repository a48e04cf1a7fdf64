"""Performance behaviour that must not change results: the source row probe and the Delta file layout."""

from __future__ import annotations

import logging

from incsync.changes import Bounds
from incsync.config import load_config
from incsync.destinations import build_destination
from incsync.sources import build_source
from incsync.staging import spark_parquet_schema, stage
from incsync_tests.jdbc_support import jdbc_config, pg_database
from incsync_tests.support import delta_rows, latest_metadata, materialize_partition, ts

MODEL_KEY = ("db", "orders")
ORDERS = """CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, status text, amount numeric(12,2),
            payload jsonb, updated_at timestamptz(6))"""


def bounds(lower, upper) -> Bounds:
    return Bounds(lower=lower, upper=upper, lookback_seconds=0, reason="test")


def test_postgres_row_probe_answers_false_only_when_the_read_would_be_empty(tmp_path):
    with pg_database() as db:
        db.execute(ORDERS)
        db.execute(
            "INSERT INTO orders VALUES (1, 'org_1', 'new', 1.00, '{}', %s), (2, 'org_2', 'new', 2.00, '{}', %s)",
            [ts(1, 10), ts(2, 10)],
        )
        config = load_config(jdbc_config(tmp_path, db))
        source, model, recipient = build_source(config.source("db")), config.model("orders"), config.recipient("acme")

        def probe(lower, upper):
            return source.has_rows(model=model, recipient=recipient, bounds=bounds(lower, upper))

        assert probe(ts(1), ts(2)) is True
        assert probe(ts(1, 10), ts(1, 10, 0, 0, 1)) is True  # lower bound inclusive, to the microsecond
        assert probe(ts(1), ts(1, 10)) is False  # upper bound exclusive
        assert probe(ts(2), ts(3)) is False  # only org_2 has a row there
        db.execute("INSERT INTO orders VALUES (3, 'org_1', 'new', 3.00, '{}', NULL)")
        assert probe(ts(2), ts(3)) is True  # a NULL last-modified row must reach validation
        # Anything it cannot answer cheaply and exactly is "don't know", never "empty".
        with_options = config.source("db").model_copy(update={"jdbc_url": db.jdbc_url + "?sslmode=disable"})
        assert build_source(with_options).has_rows(model=model, recipient=recipient, bounds=bounds(ts(2), ts(3))) is None
        wrong = config.source("db").model_copy(update={"user": "no_such_user_x"})
        assert build_source(wrong).has_rows(model=model, recipient=recipient, bounds=bounds(ts(2), ts(3))) is None


def test_empty_window_skips_spark_staging_and_is_still_recorded(spark, dagster_instance, tmp_path, caplog):
    with pg_database() as db:
        db.execute(ORDERS)
        db.execute("INSERT INTO orders VALUES (1, 'org_1', 'new', 1.00, '{\"a\": 1}', %s)", [ts(2, 8)])
        config = jdbc_config(tmp_path, db)
        from incsync.project import build_definitions

        defs = build_definitions(config)
        caplog.set_level(logging.INFO, logger="incsync.transfer")
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

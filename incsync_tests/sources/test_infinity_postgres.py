"""PostgreSQL's 'infinity' / '-infinity' in date, timestamp and timestamptz columns: a PostgreSQL
destination receives them exactly (backfill and upsert, and verify agrees), every other destination
refuses them before publishing, naming model, recipient, column and key (docs/types.md)."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from incsync.core.typemap import ColumnPlan, cast_sql, plan_column
from incsync.staging.errors import ConversionError
from incsync.staging.infinity import infinities_as_text
from incsync_tests.support.destinations import PG_DSN_ENV, Target, destination_env
from incsync_tests.support.integrity import verify
from incsync_tests.support.jdbc import pg_database
from incsync_tests.support.jdbc_transfer import rows_by, transfer, write_config

DDL = ("CREATE TABLE orders (id int PRIMARY KEY, organization_id text NOT NULL, updated_at timestamptz NOT NULL, "
       "ts timestamp(6), tstz timestamptz(6), d date, note text)")
ROWS = [
    (1, "2024-01-01 10:00+00", "infinity", "infinity", "infinity"),
    (2, "2024-01-01 11:00+00", "-infinity", "-infinity", "-infinity"),
    (3, "2024-01-01 12:00+00", "2024-01-01 10:00:00.000001", "1999-12-31 23:59:59.999999+00", "1850-01-01"),
    (4, "2024-01-01 13:00+00", None, None, None),
]


def _insert(db, rows) -> None:
    for i, lm, ts, tstz, d in rows:
        db.execute("INSERT INTO orders VALUES (%s, 'org_1', %s, %s, %s, %s, 'x') ON CONFLICT (id) DO UPDATE SET "
                   "updated_at = excluded.updated_at, ts = excluded.ts, tstz = excluded.tstz, d = excluded.d",
                   (i, lm, ts, tstz, d))


def _destination_text() -> tuple[list[tuple], dict[str, str]]:
    """The PostgreSQL destination's values as PostgreSQL prints them (psycopg reads no 'infinity'), and its types."""
    import psycopg

    with psycopg.connect(os.environ[PG_DSN_ENV]) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        rows = conn.execute("SELECT id, ts::text, tstz::text, d::text FROM acme.orders ORDER BY id").fetchall()
        types = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                                  "'acme.orders'::regclass AND attname IN ('ts', 'tstz', 'd')").fetchall())
    return rows, types


def test_postgres_to_postgres_keeps_infinity_exactly(spark, tmp_path: Path, monkeypatch) -> None:
    with pg_database() as db, destination_env("postgres", monkeypatch):
        db.execute(DDL)
        _insert(db, ROWS)
        config = write_config(tmp_path, db, "postgres")
        assert transfer(config, spark).record.rows_transferred == 4
        rows, types = _destination_text()
        assert types == {"ts": "timestamp(6) without time zone", "tstz": "timestamp(6) with time zone", "d": "date"}
        assert rows == [
            (1, "infinity", "infinity", "infinity"),
            (2, "-infinity", "-infinity", "-infinity"),
            (3, "2024-01-01 10:00:00.000001", "1999-12-31 23:59:59.999999+00", "1850-01-01"),
            (4, None, None, None),
        ]
        # An upsert swaps them: finite values become infinite and back, a NULL becomes -infinity.
        _insert(db, [(1, "2024-01-01 20:00+00", "1970-01-01 00:00:00", "2024-02-29 00:00:00.5+00", "2000-01-01"),
                     (3, "2024-01-01 20:00+00", "infinity", "-infinity", "infinity"),
                     (4, "2024-01-01 20:00+00", "-infinity", "infinity", None)])
        assert transfer(config, spark).record.rows_transferred == 4
        assert _destination_text()[0] == [
            (1, "1970-01-01 00:00:00", "2024-02-29 00:00:00.5+00", "2000-01-01"),
            (2, "-infinity", "-infinity", "-infinity"),
            (3, "infinity", "-infinity", "infinity"),
            (4, "-infinity", "infinity", None),
        ]
        checked = verify(config, spark, tmp_path)
        assert checked.passed, checked.line()
        assert (checked.counts["total_rows_compared"], checked.buckets_differing) == (4, 0)

        # A changed value in row 2's bucket: verify compares its infinite values row by row, repair restores it.
        import psycopg

        from incsync.config.load import load_config
        from incsync.transfer.repair import repair_recipient

        with psycopg.connect(os.environ[PG_DSN_ENV], autocommit=True) as conn:
            conn.execute("UPDATE acme.orders SET note = 'tampered' WHERE id = 2")
        found = verify(config, spark, tmp_path)
        assert found.findings.incorrect == [(2,)] and found.buckets_differing == 1
        assert sum(found.counts[c] for c in ("total_rows_missing", "total_rows_stale", "total_rows_orphaned")) == 0
        loaded = load_config(config)
        done = repair_recipient(loaded, loaded.model("orders"), loaded.recipient("acme"), spark=lambda: spark,
                                staging_root=tmp_path / "repair-staging")
        assert done.rows_replaced == 1
        assert _destination_text()[0][1] == (2, "-infinity", "-infinity", "-infinity")
        assert verify(config, spark, tmp_path).passed


@pytest.mark.parametrize("kind", ["delta", "object_storage"])
def test_infinity_into_any_other_destination_fails_naming_the_recipient(kind: str, spark, tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(DDL)
        _insert(db, ROWS[2:])
        config = write_config(tmp_path, db, kind)
        transfer(config, spark)  # finite values go anywhere
        _insert(db, [(4, "2024-01-01 20:00+00", "2024-01-01 00:00:00", "2024-01-01 00:00:00+00", "-infinity")])
        with pytest.raises(ConversionError) as caught:
            transfer(config, spark)
        assert str(caught.value) == (
            'model orders, recipient acme: column "d" (postgres date) holds \'-infinity\' (key 4), which no date or '
            f"timestamp type outside PostgreSQL holds, and destination acme_dest is {kind}; nothing was published. "
            'Set `column_types: {"d": text}` on the model to transfer it as its text, or send it to a PostgreSQL '
            "destination, which keeps it."
        )
        assert [r["d"] for r in rows_by(config, "id")] == [date(1850, 1, 1), None]
        assert Target(config).state().last_transfer.rows_transferred == 2  # the first transfer's record stands


def test_the_one_finite_timestamp_that_reads_as_infinity_is_refused(spark, tmp_path: Path, monkeypatch) -> None:
    with pg_database() as db, destination_env("postgres", monkeypatch):
        db.execute(DDL)
        _insert(db, [(1, "2024-01-01 10:00+00", None, "294247-01-10 04:00:54.775807+00", None)])
        with pytest.raises(ConversionError, match=r'column "tstz" .* holds .294247-01-10 .*. \(key 1\), '
                                                 r"which staging cannot tell from 'infinity'"):
            transfer(write_config(tmp_path, db, "postgres"), spark)


def test_the_read_and_the_postgres_load_forms() -> None:
    """Pure: the select-list expression of each kind, and the text a PostgreSQL destination loads."""
    plan = plan_column(vendor="postgres", name="d", spark_type="date", metadata={"jdbcClientType": "date"},
                       catalog_type="date", model="orders", key=("id",))
    assert cast_sql(plan, '"d"') == ("CASE WHEN \"d\" = 'infinity' THEN (2147483647)::integer WHEN \"d\" = '-infinity' "
                                     "THEN (-2147483648)::integer ELSE (\"d\" - DATE '1970-01-01')::integer END")
    last_modified = plan_column(vendor="postgres", name="lm", spark_type="timestamp", metadata={"jdbcClientType": "timestamptz"},
                                catalog_type=None, last_modified="lm")
    assert last_modified == ColumnPlan(name="lm", vendor="postgres", source_type="timestamp with time zone")
    meta = {b"incsync.source_type": b"timestamp(3) with time zone", b"incsync.source_vendor": b"postgres"}
    batch = pa.record_batch([pa.array([2**63 - 1, -(2**63), 1_704_103_200_000_001, None], pa.timestamp("us", tz="UTC")),
                             pa.array([1, 2, 3, 4], pa.timestamp("us", tz="UTC"))],
                            schema=pa.schema([pa.field("t", pa.timestamp("us", tz="UTC"), metadata=meta),
                                              pa.field("lake", pa.timestamp("us", tz="UTC"))]))
    text = infinities_as_text(batch)
    assert text.column(0).to_pylist() == ["infinity", "-infinity", "2024-01-01 10:00:00.000001Z", None]
    assert text.column(1).type == pa.timestamp("us", tz="UTC")  # not read from PostgreSQL: left as it is
    finite = batch.slice(2)
    assert infinities_as_text(finite) is finite  # no infinity: the batch goes as it is


def test_in_a_fan_out_only_the_recipient_whose_destination_cannot_hold_infinity_fails(
    spark, dagster_instance, tmp_path: Path, monkeypatch
) -> None:
    """One read for three recipients: acme (PostgreSQL) gets its 'infinity', globex (Delta) fails naming
    itself, initech (Delta, finite dates only) is published."""
    import dagster as dg
    import yaml
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
    from incsync.orchestration.definitions import build_definitions
    from incsync_tests.support.destinations import destination_spec
    from incsync_tests.support.jdbc import jdbc_config
    from incsync_tests.support.lake import delta_rows

    recipients = [{"id": r, "id_in_provider_system": f"org_{n}", "destination": f"{r}_dest"}
                  for n, r in enumerate(("acme", "globex", "initech"), start=1)]
    with pg_database() as db, destination_env("postgres", monkeypatch):
        db.execute(DDL)
        for i, org, d in ((1, "org_1", "infinity"), (2, "org_2", "-infinity"), (3, "org_3", "2024-01-01")):
            db.execute("INSERT INTO orders VALUES (%s, %s, '2024-01-01 10:00+00', NULL, NULL, %s, 'x')", (i, org, d))
        config = jdbc_config(tmp_path, db, recipients=recipients)
        doc = yaml.safe_load(config.read_text())
        doc["destinations"][0] = destination_spec("postgres", name="acme_dest")
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex", "initech"])
        model = dg.AssetKey(["db", "orders"])
        result = build_definitions(config).resolve_implicit_global_asset_job_def().execute_in_process(
            instance=dagster_instance, asset_selection=[model], raise_on_error=False,
            tags={ASSET_PARTITION_RANGE_START_TAG: str(partition_key("2024-01-01", "acme")),
                  ASSET_PARTITION_RANGE_END_TAG: str(partition_key("2024-01-01", "initech"))},
        )
        assert not result.success
        assert dagster_instance.get_materialized_partitions(model) == {"acme|2024-01-01", "initech|2024-01-01"}
        import psycopg

        with psycopg.connect(os.environ[PG_DSN_ENV]) as conn:
            assert conn.execute("SELECT id, d::text FROM acme.orders").fetchall() == [(1, "infinity")]
        assert [(r["id"], r["d"]) for r in delta_rows(tmp_path / "out" / "initech" / "orders")] == [(3, date(2024, 1, 1))]
        failures = [e.event_specific_data.error.message for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        assert len(failures) == 1 and failures[0].startswith("dagster._core.definitions.events.Failure: model orders, "
                                                             "recipient globex, window 2024-01-01 not committed: ")
        assert 'column "d" (postgres date) holds \'-infinity\' (key 2)' in failures[0] and "globex_dest is delta" in failures[0]

"""Fan-out reads from real PostgreSQL and MariaDB: one query for a run's recipients, each with its own
bounds; one recipient's unwritable destination fails only that recipient."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.definitions import build_definitions
from incsync.sources.jdbc.source import JdbcSource
from incsync_tests.sources.test_jdbc_sources import MARIA_ORDERS, PG_ORDERS, maria_insert, pg_insert
from incsync_tests.support.jdbc import jdbc_config, maria_database, pg_database
from incsync_tests.support.lake import delta_rows, ts

MODEL = dg.AssetKey(["db", "orders"])
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
    {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_delta"},
]


def _rows() -> list[tuple]:
    return [
        (1, "org_1", "new", "1.50", '{"a": 1}', True, ts(1, 1)),
        (2, "org_1", "new", "2.50", '{"a": 2}', False, ts(2, 1)),
        (3, "org_2", "new", "3.50", '{"a": 3}', True, ts(2, 2)),
        (4, "org_3", "new", "4.50", '{"a": 4}', True, ts(1, 3)),
        (5, "org_3", "new", "5.50", '{"a": 5}', True, ts(2, 3)),
        (6, "org_4", "new", "6.50", '{"a": 6}', True, ts(2, 4)),  # nobody's tenant
    ]


@pytest.mark.parametrize("vendor", ["postgres", "mariadb"])
def test_one_query_for_three_recipients_and_an_unwritable_destination_fails_alone(
    vendor: str, spark, dagster_instance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    original = JdbcSource.read_many

    def counting(self, *args, **kwargs):
        reads.append(len(kwargs["targets"]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(JdbcSource, "read_many", counting)
    database = pg_database() if vendor == "postgres" else maria_database()
    with database as db:
        if vendor == "postgres":
            db.execute(PG_ORDERS.format(table="orders"))
            pg_insert(db, "orders", [(*r[:6], None, r[6]) for r in _rows()])
        else:
            db.execute(MARIA_ORDERS.format(table="orders", lm="TIMESTAMP(6)"))
            maria_insert(db, "orders", _rows())
        config = jdbc_config(tmp_path, db, recipients=RECIPIENTS, model={
            "columns": ["id", "organization_id", "status", "updated_at"], "min_start_time_epoch": 1704067200,
        })
        doc = yaml.safe_load(config.read_text())
        (tmp_path / "blocked").write_text("a file where globex's table folder should be")
        doc["destinations"][1]["path"] = "./blocked"
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex", "initech"])
        job = build_definitions(config).resolve_implicit_global_asset_job_def()

        result = job.execute_in_process(
            instance=dagster_instance, asset_selection=[MODEL], raise_on_error=False,
            tags={ASSET_PARTITION_RANGE_START_TAG: str(partition_key("2024-01-01", "acme")),
                  ASSET_PARTITION_RANGE_END_TAG: str(partition_key("2024-01-02", "initech"))},
        )

    assert not result.success
    assert reads == [3]
    assert dagster_instance.get_materialized_partitions(MODEL) == {
        "acme|2024-01-01", "acme|2024-01-02", "initech|2024-01-01", "initech|2024-01-02"
    }
    assert [(r["id"], r["organization_id"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [(1, "org_1"), (2, "org_1")]
    assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "initech" / "orders")] == [(4, ts(1, 3)), (5, ts(2, 3))]
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "globex" in failure.step_failure_data.error.cause.message

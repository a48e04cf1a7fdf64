"""Pins the Dagster and storage behaviour incsync/dagster_compat.py relies on."""

from __future__ import annotations

import sqlite3

import dagster as dg
import pytest
import sqlalchemy

from incsync.dagster_compat import SQLITE_SYNC_ENV_VAR, add_partition_metadata, tune_sqlite_storage
from incsync.errors import ConfigError

DAYS = dg.StaticPartitionsDefinition(["a", "b", "c"])


class _RecordingIOManager(dg.ConfigurableIOManager):
    def handle_output(self, context: dg.OutputContext, obj: dict[str, int]) -> None:
        add_partition_metadata(context, {key: {"rows": dg.MetadataValue.int(n)} for key, n in obj.items()})

    def load_input(self, context: dg.InputContext) -> None:
        return None


@dg.asset(partitions_def=DAYS, io_manager_key="recording")
def counted(context) -> dict[str, int]:  # noqa: ANN001 - Dagster reads the annotation itself
    return {key: ord(key) for key in context.partition_keys}


def test_each_partition_of_a_range_run_gets_its_own_metadata(dagster_instance) -> None:
    result = dg.materialize(
        [counted], instance=dagster_instance, resources={"recording": _RecordingIOManager()},
        tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "c"},
    )
    assert result.success
    records = dagster_instance.fetch_materializations(dg.AssetKey("counted"), limit=10).records
    got = {r.asset_materialization.partition: r.asset_materialization.metadata["rows"].value for r in records}
    assert got == {"a": 97, "b": 98, "c": 99}


def test_sqlite_connections_commit_without_fsync_and_the_mode_is_validated(tmp_path, monkeypatch) -> None:
    tune_sqlite_storage()
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 0  # OFF
    assert sqlite3.connect(tmp_path / "y.db").execute("PRAGMA synchronous").fetchone()[0] == 2  # others untouched
    monkeypatch.setenv(SQLITE_SYNC_ENV_VAR, "sometimes")
    with pytest.raises(ConfigError, match='INCSYNC_SQLITE_SYNC: "sometimes" must be one of off, normal, full'):
        tune_sqlite_storage()

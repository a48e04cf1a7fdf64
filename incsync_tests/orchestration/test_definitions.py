"""What `incsync.definitions` defines, and that loading it starts no JVM and touches no database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from incsync.config.load import load_config
from incsync.core.fingerprint import model_fingerprint
from incsync.operations.partitions import RECIPIENT_DIM, WINDOW_DIM
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import lake_config


def test_importing_definitions_starts_no_jvm(tmp_path: Path) -> None:
    config = lake_config(tmp_path)
    probe = (
        "import json, sys, time\n"
        "t = time.time()\n"
        "import incsync.definitions as d\n"
        "from pyspark import SparkContext\n"
        "print(json.dumps({'spark_started': SparkContext._gateway is not None,\n"
        "  'pyspark_sql_loaded': 'pyspark.sql.session' in sys.modules and SparkContext._active_spark_context is not None,\n"
        "  'assets': sorted(k.to_user_string() for k in d.defs.resolve_all_asset_keys()),\n"
        "  'row_libraries': sorted(m for m in ('numpy', 'pandas', 'pyarrow') if m in sys.modules),\n"
        "  'seconds': round(time.time() - t, 1)}))\n"
    )
    env = {**os.environ, "INCSYNC_CONFIG": str(config)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["spark_started"] is False
    assert facts["pyspark_sql_loaded"] is False
    assert facts["assets"] == ["lake/orders", "lake/tables/lake.orders"]
    # what moves rows is loaded by the run, not by every code server the daemon keeps (~130 MB each)
    assert facts["row_libraries"] == []


def test_loading_the_definitions_changes_no_process_wide_state(tmp_path: Path) -> None:
    """Importing `incsync.definitions` and building another file's definitions leave the environment and
    SQLAlchemy's listeners as they were: a SQLite connection opened afterwards still syncs as SQLite's
    default. What a run needs is set when it starts, what an instance needs by its dagster.yaml."""
    config = lake_config(tmp_path, destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
                                                 {"name": "files", "kind": "object_storage", "path": "./out/files"}])
    probe = (
        "import json, os, sqlite3\n"
        "import dagster, sqlalchemy\n"
        "from sqlalchemy.event import registry\n"
        "env, listeners = dict(os.environ), set(registry._key_to_collection)\n"
        "import incsync.definitions\n"
        "from incsync.orchestration.definitions import build_definitions\n"
        "build_definitions(os.environ['INCSYNC_CONFIG'])\n"
        "added = len(set(registry._key_to_collection) - listeners)\n"
        "engine = sqlalchemy.create_engine('sqlite:///' + os.environ['PROBE_DB'])\n"
        "with engine.connect() as conn:\n"
        "    synchronous = conn.exec_driver_sql('PRAGMA synchronous').scalar()\n"
        "print(json.dumps({'environment': sorted(k for k in {*env, *os.environ} if env.get(k) != os.environ.get(k)),\n"
        "  'listeners': added, 'synchronous': synchronous}))\n"
    )
    quiet = ("PYSPARK_PYTHON", "DAGSTER_EVENT_BATCH_SIZE", "INCSYNC_SQLITE_SYNC")  # unset: a default set would show
    env = {k: v for k, v in os.environ.items() if k not in quiet} | {"INCSYNC_CONFIG": str(config),
                                                                    "PROBE_DB": str(tmp_path / "probe.db")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"environment": [], "listeners": 0, "synchronous": 2}


def test_asset_shape(tmp_path: Path) -> None:
    file = lake_config(tmp_path)
    defs = build_definitions(file)
    model = load_config(file).model("orders")
    asset = defs.resolve_assets_def(dg.AssetKey(["lake", "orders"]))
    spec = next(iter(asset.specs))
    assert spec.group_name == "lake"
    assert asset.code_versions_by_key[asset.key] == model_fingerprint(model)
    assert [dep.asset_key for dep in spec.deps] == [dg.AssetKey(["lake", "tables", "lake.orders"])]
    partitions = asset.partitions_def
    assert isinstance(partitions, dg.MultiPartitionsDefinition)
    dims = {d.name: d.partitions_def for d in partitions.partitions_defs}
    assert isinstance(dims[RECIPIENT_DIM], dg.DynamicPartitionsDefinition)
    assert dims[RECIPIENT_DIM].name == "recipients"
    window = dims[WINDOW_DIM]
    assert isinstance(window, dg.TimeWindowPartitionsDefinition)
    assert (window.cron_schedule, window.fmt, window.end_offset) == ("0 0 * * *", "%Y-%m-%d", 1)
    assert window.start.timestamp() == 1704067200
    assert set(defs.resources) >= {"spark", "incsync", "incsync_io_manager", "source_lake", "delta_destination"}
    source = defs.resolve_assets_def(dg.AssetKey(["lake", "tables", "lake.orders"]))
    assert not source.is_executable


def test_fingerprint_changes_with_model_shape(tmp_path: Path) -> None:
    model = load_config(lake_config(tmp_path)).model("orders")
    same = model.model_copy()
    assert model_fingerprint(same) == model_fingerprint(model)
    assert model_fingerprint(model.model_copy(update={"primary_key": ["id", "status"]})) != model_fingerprint(model)
    assert model_fingerprint(model.model_copy(update={"columns": ["id", "updated_at"]})) != model_fingerprint(model)
    assert model_fingerprint(model.model_copy(update={"max_transfer_time_window_seconds": 3600})) == model_fingerprint(model)


def test_hourly_grid_and_source_query_lineage(tmp_path: Path) -> None:
    file = lake_config(
        tmp_path,
        model={"max_transfer_time_window_seconds": 3600, "source_table": None,
               "source_query": "SELECT * FROM orders WHERE status <> 'test'"},
    )
    defs = build_definitions(file)
    asset = defs.resolve_assets_def(dg.AssetKey(["lake", "orders"]))
    window = {d.name: d.partitions_def for d in asset.partitions_def.partitions_defs}[WINDOW_DIM]
    assert (window.cron_schedule, window.fmt) == ("0 * * * *", "%Y-%m-%d-%H:%M")
    assert [d.asset_key for d in next(iter(asset.specs)).deps] == [dg.AssetKey(["lake", "queries", "lake.orders_query"])]

"""The embedded JVM's heap is sized from the file's plan; a user's own heap, a Connect server's and a
cluster's are left alone; and the planned heap moves a large tenant with wide rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from incsync.orchestration.definitions import build_definitions
from incsync.spark.memory import HEAP_CAP_MB, HEAP_FLOOR_MB, planned_heap_mb
from incsync.spark.server import server_command
from incsync.spark.session import spark_config
from incsync_tests.jdbc_support import jdbc_config, pg_database
from incsync_tests.support import lake_config

LOCAL_FOUR = {"spark.master": "local[4]"}


def heap(conf: dict[str, str]) -> str | None:
    return conf.get("spark.driver.memory")


@pytest.mark.parametrize(("master", "queries", "expected"), [
    ("local[4]", 1, "512m"), ("local[4]", 2, "768m"), ("local[4]", 4, "1280m"), ("local[4]", 16, "1280m"),
    ("local[1]", 4, "512m"), ("local", 3, "512m"), ("local[64]", 64, f"{HEAP_CAP_MB}m"),
], ids=["one-query", "two-queries", "a-query-per-core", "more-queries-than-cores", "one-core", "local", "capped"])
def test_a_local_jvm_gets_a_heap_for_the_tasks_it_runs_at_once(master: str, queries: int, expected: str) -> None:
    assert heap(spark_config({"spark.master": master}, queries=queries)) == expected
    assert planned_heap_mb(concurrent_tasks=1) == HEAP_FLOOR_MB >= 450  # Spark refuses less than 450 MB


def test_the_plan_is_the_widest_read_of_the_files_models(tmp_path: Path) -> None:
    with pg_database() as db:
        narrow = build_definitions(jdbc_config(tmp_path, db)).resources["spark"].spark_config
        wide = build_definitions(jdbc_config(tmp_path, db, source={"max_concurrent_queries_per_transfer": 3})).resources
    assert heap(narrow) == "512m"
    assert heap(wide["spark"].spark_config) == f"{planned_heap_mb(concurrent_tasks=min(3, os.cpu_count() or 1))}m"
    (tmp_path / "lake").mkdir()
    lake = build_definitions(lake_config(tmp_path / "lake")).resources["spark"].spark_config  # files: a task per core
    assert heap(lake) == f"{planned_heap_mb(concurrent_tasks=os.cpu_count() or 1)}m"


@pytest.mark.parametrize("own", [
    {"spark.driver.memory": "3g"},
    {"spark.driver.extraJavaOptions": "-Xmx3g -Dlog4j2.configurationFile=file:/etc/log4j2.properties"},
], ids=["spark.driver.memory", "Xmx-in-java-options"])
def test_a_users_own_heap_wins(own: dict[str, str]) -> None:
    conf = spark_config({**LOCAL_FOUR, **own}, queries=4)
    assert {k: conf.get(k) for k in own} == own
    assert heap(conf) == own.get("spark.driver.memory")


def test_spark_driver_memory_in_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "3g")  # Spark's launcher would rank our setting above it
    assert heap(spark_config(LOCAL_FOUR)) is None


@pytest.mark.parametrize("settings", [
    {"spark.remote": "sc://127.0.0.1:15002"},
    {"spark.master": "spark://127.0.0.1:7077"},
    {"spark.master": "k8s://https://10.0.0.1:6443"},
    {"spark.master": "yarn"},
], ids=["connect", "standalone", "kubernetes", "yarn"])
def test_a_connect_server_or_a_cluster_owns_its_driver(settings: dict[str, str]) -> None:
    assert heap(spark_config(settings, queries=4)) is None


def test_the_connect_server_incsync_starts_is_sized_for_a_read_per_core() -> None:
    def conf(command: list[str]) -> dict[str, str]:
        return dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")

    assert heap(conf(server_command(port=15999, master="local[2]"))) == "768m"
    assert heap(conf(server_command(port=15999, master="local[2]", extra_conf={"spark.driver.memory": "4g"}))) == "4g"
    assert heap(conf(server_command(port=15999, master="spark://127.0.0.1:7077"))) is None


TENANT_ROWS = 200_000
_RUN = """
import json, sys
from incsync.cli.main import main
code = main(["transfer", "orders", "--recipient", "acme", "--from", "2024-01-01", "--to", "2024-01-03", "-c", sys.argv[1]])
from pyspark import SparkContext
jvm = SparkContext._active_spark_context._jvm
args = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
print(json.dumps({"code": code, "max_mb": jvm.java.lang.Runtime.getRuntime().maxMemory() >> 20,
                  "xmx": [a for a in args if a.startswith("-Xmx")]}))
"""


def test_the_planned_heap_reaches_the_jvm_and_moves_a_large_tenant_with_wide_rows(tmp_path: Path) -> None:
    """One cold JVM, started by `incsync transfer` in a process of its own, as a user's run starts it."""
    with pg_database() as db:
        db.execute("""CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, status text,
                      amount numeric(12,2), payload jsonb, updated_at timestamptz(6))""")
        db.execute("""INSERT INTO orders
                      SELECT g, CASE WHEN g %% 10 = 0 THEN 'org_2' ELSE 'org_1' END, 'new', g %% 1000 / 100.0,
                             jsonb_build_object('n', g, 'blob', repeat(md5(g::text), 16)),
                             '2024-01-01'::timestamptz + (g %% 259200) * interval '1 second'
                      FROM generate_series(1, %s) g""", [TENANT_ROWS * 10 // 9])
        db.execute("CREATE INDEX ON orders (organization_id, updated_at)")
        file = jdbc_config(tmp_path, db)  # the default max_rows_per_batch and one query: the floor heap
        env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path(__file__).parents[2])}
        env.pop("SPARK_DRIVER_MEMORY", None)
        done = subprocess.run([sys.executable, "-c", _RUN, str(file)], capture_output=True, text=True, timeout=600,
                              cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, done.stdout[-3000:]
    assert result["xmx"] == ["-Xmx512m"] and result["max_mb"] == 512
    table = DeltaTable(str(tmp_path / "out" / "acme" / "orders")).to_pyarrow_dataset()
    assert table.count_rows() == TENANT_ROWS
    assert len(table.head(1, columns=["payload"]).column(0)[0].as_py()) > 512

"""A Spark standalone cluster (one master, one worker, started from the pyspark install on loopback):
a JDBC (PostgreSQL) -> Delta and a lake -> PostgreSQL transfer run on its executors, which get the
JDBC driver through spark.jars. Staging is a local folder the executors share with the driver here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml

from incsync.config.load import load_config
from incsync.errors import ConfigError
from incsync.spark.server import stop_server
from incsync.spark.session import spark_config
from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.host import free_port
from incsync_tests.support.lake import JAN1_EPOCH, delta_rows, lake_config, order, ts, write_table


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


class Cluster:
    def __init__(self, master_url: str, ui: str, work_dir: Path):
        self.master_url, self.ui, self.work_dir = master_url, ui, work_dir


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Master and worker in their own sessions on free loopback ports; every process ended after."""
    root = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable}
    port, ui = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    started = []
    try:
        for name, args in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)]),
            ("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port()),
                        "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g", "--work-dir", str(root / "work"),
                        master_url]),
        ):
            with open(root / f"{name}.log", "wb") as out:
                started.append(subprocess.Popen([_spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True))
        deadline = time.monotonic() + 120
        while True:
            try:
                if [w["state"] for w in _json(f"http://127.0.0.1:{ui}/json/")["workers"]] == ["ALIVE"]:
                    break
            except OSError:
                pass
            assert all(p.poll() is None for p in started) and time.monotonic() < deadline, (
                (root / "master.log").read_text()[-2000:] + (root / "worker.log").read_text()[-2000:])
            time.sleep(1)
        yield Cluster(master_url, f"http://127.0.0.1:{ui}", root / "work")
    finally:
        for process in reversed(started):
            stop_server(process)


def test_driver_address_stays_on_loopback_unless_executors_are_elsewhere() -> None:
    local = spark_config({})
    assert (local["spark.driver.host"], local["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    on_this_host = spark_config({"spark.master": "spark://127.0.0.1:7077"})
    assert on_this_host["spark.driver.host"] == "127.0.0.1"
    remote = spark_config({"spark.master": "spark://spark-master.internal:7077"})
    assert "spark.driver.host" not in remote and "spark.driver.bindAddress" not in remote  # Spark: this host's name
    chosen = spark_config({"spark.master": "spark://10.0.0.5:7077", "spark.driver.host": "10.0.0.9",
                           "spark.driver.bindAddress": "0.0.0.0"})
    assert (chosen["spark.driver.host"], chosen["spark.driver.bindAddress"]) == ("10.0.0.9", "0.0.0.0")
    assert chosen["spark.jars"].split(",")[0] == "/usr/share/java/postgresql.jar"  # shipped to the executors


def test_a_loopback_driver_for_a_remote_master_is_refused(tmp_path: Path) -> None:
    file = lake_config(tmp_path)
    doc = yaml.safe_load(file.read_text())
    doc["spark"] = {"spark.master": "spark://10.0.0.5:7077", "spark.driver.host": "127.0.0.1"}
    file.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r'spark.spark.driver.host: "127.0.0.1" is a loopback address, but spark.master '
                                          r'"spark://10.0.0.5:7077" runs executors on other machines'):
        load_config(file)


def _source_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, status text, "
                     "amount double precision, updated_at timestamptz)")
        with conn.cursor().copy("COPY orders FROM STDIN") as copy:
            for row in (order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2), amount=2.5), order(3, "org_2", ts(1, 3))):
                copy.write_row(list(row.values()))


@pytest.mark.slow  # ~60 s with the cluster's start: make test-long
def test_jdbc_to_delta_and_lake_to_postgres_on_a_standalone_cluster(standalone: Cluster, s3, tmp_path: Path) -> None:
    """Staging on the S3 server, so driver and executors share no folder (issue 14)."""
    from incsync.storage.files import open_store
    from incsync.storage.filesystems import resolve_options

    write_table(tmp_path / "src", "orders", [order(10, "org_1", ts(1, 4)), order(11, "org_2", ts(1, 5)),
                                             order(12, "org_2", ts(1, 6), status="paid")])
    with postgres_database() as dsn:
        _source_table(dsn)
        file = lake_config(
            tmp_path,
            recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
                        {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_pg"}],
            destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
                          {"name": "globex_pg", "kind": "postgres", "dsn_env": "CLUSTER_PG_DSN", "schema": "globex"}],
        )
        doc = yaml.safe_load(file.read_text())
        user, database = dsn.split("://", 1)[1].split("@")[0], dsn.rsplit("/", 1)[1]
        doc["sources"].append({"name": "app_db", "vendor": "postgres", "user": user,
                               "jdbc_url": f"jdbc:postgresql://127.0.0.1:5432/{database}"})
        doc["models"].append({**doc["models"][0], "model_name": "app_orders", "source": "app_db",
                              "source_table": "public.orders", "min_start_time_epoch": JAN1_EPOCH})
        doc["spark"] = {"spark.master": standalone.master_url, "spark.executor.memory": "512m", "spark.cores.max": "1",
                        "spark.sql.shuffle.partitions": "2"}
        staging = f"s3://{s3.bucket()}/staging"
        doc["staging_dir"], doc["staging_storage_options"] = staging, s3.options()
        file.write_text(yaml.safe_dump(doc, sort_keys=False))
        script = (
            "import sys; from incsync.cli.main import main; "
            f"sys.exit(main(['transfer', 'app_orders', '--recipient', 'acme', '--window', '2024-01-01', '-c', {str(file)!r}]) "
            f"or main(['transfer', 'orders', '--recipient', 'globex', '--window', '2024-01-01', '-c', {str(file)!r}]))"
        )
        env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "CLUSTER_PG_DSN": dsn, "PYSPARK_PYTHON": sys.executable}
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        took = time.monotonic() - started
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
        with psycopg.connect(dsn) as conn:
            pg_rows = conn.execute("SELECT id, organization_id, status FROM globex.orders ORDER BY id").fetchall()

    lines = [line.split()[:5] for line in out.stdout.splitlines() if line.startswith(("app_orders", "orders"))]
    assert lines == [
        ["app_orders", "acme", "2024-01-01", "rows_transferred=2", "delta_rows_transferred=2"],
        ["orders", "globex", "2024-01-01", "rows_transferred=2", "delta_rows_transferred=2"],
    ]
    assert [(r["id"], r["amount"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "app_orders")] == [
        (1, 1.0, ts(1, 1)), (2, 2.5, ts(1, 2))]
    assert pg_rows == [(11, "org_2", "new"), (12, "org_2", "paid")]
    staged = open_store(staging, resolve_options(s3.options(), "test"))
    assert [f.path for f in staged.list(recursive=True) if f.type.name == "File"] == []  # each transfer cleaned up
    # The work ran on the worker's executors: the application is the master's, with executor logs on the worker.
    apps = _json(f"{standalone.ui}/json/")
    assert [a["name"] for a in apps["completedapps"] + apps["activeapps"]] == ["incsync"]
    assert list(standalone.work_dir.glob("app-*/*/stderr"))
    print(f"two transfers through the standalone cluster (driver start included): {took:.1f} s")

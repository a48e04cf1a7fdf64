"""Spark kept warm in a Connect server: transfers through `spark.remote` behave exactly as local ones."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from incsync.spark.server import server_command
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table


def test_server_command_binds_loopback_and_ships_jdbc_drivers() -> None:
    command = server_command(port=15999, master="local[2]")
    assert command[1:3] == ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    assert "spark.connect.grpc.binding.address=127.0.0.1" in command
    assert "spark.connect.grpc.binding.port=15999" in command
    jars = command[command.index("--jars") + 1].split(",")
    assert "/usr/share/java/postgresql.jar" in jars and "/usr/share/java/mariadb-java-client.jar" in jars
    assert command[-1] == "spark-internal"


def _cli(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run([str(Path(sys.executable).with_name("incsync")), *args], capture_output=True, text=True,
                         timeout=300, env=env)
    return out, time.monotonic() - started


def test_transfers_through_connect_match_local(connect_port: int, tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 23, 59, 59, 999_999)),
        order(3, "org_1", ts(2)), order(4, "org_2", ts(1, 5)),
    ])
    file = lake_config(tmp_path)
    doc = yaml.safe_load(file.read_text())
    doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}
    file.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    first, cold_client = _cli("transfer", "orders", "--recipient", "acme", "--window", "2024-01-01", "-c", str(file), env=env)
    assert first.returncode == 0, first.stderr
    second, warm = _cli("transfer", "orders", "--recipient", "acme", "--window", "2024-01-02", "-c", str(file), env=env)
    assert second.returncode == 0, second.stderr
    lines = [line.split() for line in (first.stdout + second.stdout).splitlines() if line.startswith("orders")]
    assert [(line[2], line[3], line[4], line[5]) for line in lines] == [
        ("2024-01-01", "rows_transferred=2", "delta_rows_transferred=2", "high_watermark=2024-01-01T23:59:59.999999+00:00"),
        ("2024-01-02", "rows_transferred=2", "delta_rows_transferred=2", "high_watermark=2024-01-02T00:00:00+00:00"),
    ]
    assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [
        (1, ts(1, 1)), (2, ts(1, 23, 59, 59, 999_999)), (3, ts(2))
    ]
    print(f"connect client process: first {cold_client:.1f} s, second {warm:.1f} s")

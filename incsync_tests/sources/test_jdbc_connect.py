"""JDBC sources through a Spark Connect server: same rows, same clear errors, no secret on the server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from incsync.spark.server import start_server, stop_server
from incsync_tests.support.jdbc import jdbc_config, pg_database

# Runs in its own process: a Connect client and the suite's classic session do not share a process.
CLIENT = textwrap.dedent(
    """
    import json, sys
    from datetime import datetime, timezone
    from pyspark.sql import SparkSession
    from incsync.core.bounds import Bounds
    from incsync.config.load import load_config
    from incsync.sources.registry import build_source, check_sources

    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    out = {}
    try:
        good, bad = load_config(sys.argv[2]), load_config(sys.argv[3])
        bounds = Bounds(lower=datetime(2024, 1, 1, tzinfo=timezone.utc), upper=datetime(2024, 1, 2, tzinfo=timezone.utc),
                        lookback_seconds=0, reason="test")
        df = build_source(good.source("db")).read(spark, model=good.model("orders"), recipient=good.recipients[0], bounds=bounds)
        out["rows"] = sorted([r["id"], r["organization_id"], r["updated_at"].isoformat()] for r in df.collect())
        out["good"], out["bad"] = check_sources(good, spark), check_sources(bad, spark)
    finally:
        spark.stop()
    print(json.dumps(out))
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # ~17 s (a Connect server of its own): make test-long; Connect runs in make test through test_spark_connect.py and the worker
def test_jdbc_read_and_check_through_spark_connect(tmp_path: Path, monkeypatch) -> None:
    secret = "connect-s3cret-value"
    monkeypatch.setenv("DB_PASSWORD", secret)
    with pg_database() as db:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, updated_at timestamptz(6) NOT NULL)")
        db.execute(
            "INSERT INTO orders VALUES (1, 'o''x; --', '2024-01-01 10:00:00.000001+00'), (2, 'o''x; --', '2024-01-02 00:00:00+00'),"
            " (3, 'other', '2024-01-01 11:00:00+00')"
        )
        recipients = [{"id": "acme", "id_in_provider_system": "o'x; --", "destination": "acme_delta"}]
        source = {"password_env": "DB_PASSWORD", "max_concurrent_queries_per_transfer": 2}
        (tmp_path / "good").mkdir()
        (tmp_path / "bad").mkdir()
        good = jdbc_config(tmp_path / "good", db, recipients=recipients, source=source)
        bad = jdbc_config(tmp_path / "bad", db, recipients=recipients, source={**source, "user": "no_such_role"})
        port, log = _free_port(), tmp_path / "server.log"
        server = start_server(port=port, master="local[2]", log_file=log)
        try:
            result = subprocess.run(
                [sys.executable, "-c", CLIENT, f"sc://127.0.0.1:{port}", str(good), str(bad)],
                capture_output=True, text=True, timeout=300,
            )
        finally:
            stop_server(server)
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout.strip().splitlines()[-1])
        assert out["rows"] == [[1, "o'x; --", "2024-01-01T10:00:00.000001"]]  # naive UTC, as collect() gives
        assert out["good"] == []
        [problem] = out["bad"]
        assert problem.startswith("models.orders (recipient acme): source db: model orders, recipient acme: ")
        assert 'FATAL: role "no_such_role" does not exist' in problem and "check `user` (no_such_role)" in problem
        for text in (problem, result.stdout, result.stderr, log.read_text()):
            assert secret not in text
        assert yaml.safe_load(good.read_text())["sources"][0]["password_env"] == "DB_PASSWORD"

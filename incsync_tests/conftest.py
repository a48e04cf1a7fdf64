"""Shared fixtures: one Spark session for the whole suite, lake tables, configs, Dagster instances."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from incsync_tests.support.host import free_port
from incsync_tests.support.lake import SPARK_TEST_CONFIG

# `incsync transfer` runs in the calling process here (and in the CLI processes the tests start), as the tests of
# its path expect; incsync_tests/worker/test_auto_worker.py turns the automatic worker back on for its own calls.
os.environ["INCSYNC_AUTO_WORKER"] = "0"


@pytest.fixture(scope="session")
def spark():
    """A warm local Spark session shared by every test (a cold start costs 10-30 s here)."""
    from pyspark.sql import SparkSession

    from incsync.spark.session import workers_use_this_python

    workers_use_this_python()
    builder = SparkSession.builder
    for key, value in SPARK_TEST_CONFIG.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A local Spark Connect server (local[2]) for the tests that keep Spark warm across processes."""
    from incsync.spark.server import port_open, start_server, stop_server

    port = free_port()
    process = start_server(port=port, master="local[2]", log_file=tmp_path_factory.mktemp("connect") / "server.log")
    try:
        yield port
    finally:
        stop_server(process)
    assert not port_open(port)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def dagster_instance(tmp_path: Path) -> Iterator[object]:
    import dagster as dg

    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)  # instance_for_test writes dagster.yaml into it and does not create it
    from incsync.operations.dagster_compat import event_log_storage_config

    overrides = {"event_log_storage": event_log_storage_config(home)}
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        yield instance


@pytest.fixture
def unique_name() -> str:
    return f"incsync_t_{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _isolated_staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    staging = tmp_path / "staging"
    monkeypatch.setenv("INCSYNC_STAGING_DIR", str(staging))
    yield
    shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server on a free loopback port for the whole session, stopped after."""
    from incsync_tests.support.s3 import start_s3_server

    yield from start_s3_server(tmp_path_factory.mktemp("moto") / "server.log")


@pytest.fixture
def s3(s3_server, monkeypatch: pytest.MonkeyPatch):
    """The S3 server with its secret exported under the variable the test configs name."""
    from incsync_tests.support.s3 import SECRET, SECRET_VAR

    monkeypatch.setenv(SECRET_VAR, SECRET)
    return s3_server


@pytest.fixture
def pg_role(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A database, a schema ``acme`` the admin owns, and a login role the destination's DSN (in
    ``ROLE_DSN_ENV``) uses with USAGE and CREATE on it (the grants a recipient gives a provider): (role,
    admin DSN of the database). The blame tests and the alert tests provoke a recipient's failures with it."""
    from incsync.destinations.postgres.pool import close_pool
    from incsync_tests.support.destinations import ROLE_DSN_ENV, _admin_connect, postgres_database

    role = f"incsync_t_{uuid.uuid4().hex[:8]}"
    with postgres_database() as admin_dsn:
        import psycopg

        database = admin_dsn.rsplit("/", 1)[1]
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
            conn.execute(f'GRANT CONNECT, CREATE ON DATABASE "{database}" TO "{role}"')
            conn.execute('CREATE SCHEMA acme')
            conn.execute(f'GRANT USAGE, CREATE ON SCHEMA acme TO "{role}"')
        dsn = f"postgresql://{role}@127.0.0.1:5432/{database}"
        monkeypatch.setenv(ROLE_DSN_ENV, dsn)
        try:
            yield role, admin_dsn
        finally:
            close_pool(dsn)
    admin, _ = _admin_connect()
    with admin:
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')

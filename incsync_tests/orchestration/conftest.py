"""Fixtures of the automation tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from incsync_tests.support.destinations import _admin_connect, postgres_database

DSN_ENV = "INCSYNC_TEST_BLAME_DSN"  # the DSN of the pg_role fixture's destination


@pytest.fixture
def instance(dagster_instance) -> Iterator[object]:
    """A persistent (SQLite) Dagster instance in the test's own folder."""
    yield dagster_instance


@pytest.fixture
def pg_role(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A database, a schema ``acme`` the admin owns, and a login role the destination's DSN uses with USAGE and
    CREATE on it (the grants a recipient gives a provider): (role, admin DSN of the database)."""
    from incsync.destinations.postgres.pool import close_pool

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
        monkeypatch.setenv(DSN_ENV, dsn)
        try:
            yield role, admin_dsn
        finally:
            close_pool(dsn)
    admin, _ = _admin_connect()
    with admin:
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')

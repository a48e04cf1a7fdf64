"""Dagster on PostgreSQL: the storage URL form that works here, and the clear error for the ones that do not."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml

from incsync.config.load import load_config
from incsync.errors import ConfigError
from incsync.operations.concurrency import dagster_yaml
from incsync.operations.dagster_compat import instance_postgres_url
from incsync.operations.instance import postgres_url_problem, storage_problems
from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.lake import lake_config

REPO = Path(__file__).resolve().parents[2]


def _instance(home: Path, url: str) -> dg.DagsterInstance:
    (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}}}))
    return dg.DagsterInstance.from_config(str(home))


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg"])
def test_psycopg3_urls_fail_at_the_first_event_and_psycopg2_works(tmp_path: Path, scheme: str) -> None:
    """Why incsync refuses every scheme but postgresql+psycopg2 (SQLAlchemy 2.1 maps postgresql:// to psycopg 3)."""
    @dg.asset
    def one() -> int:
        return 1

    with postgres_database() as dsn:
        tail = dsn.split("://", 1)[1]
        with _instance(tmp_path, f"{scheme}://{tail}") as instance:
            with pytest.raises(Exception, match=r'syntax error at or near "\$1"'):
                dg.materialize([one], instance=instance)
        with _instance(tmp_path, f"postgresql+psycopg2://{tail}") as instance:
            assert instance_postgres_url(instance) == f"postgresql+psycopg2://{tail}"  # where its transfer slots live
            assert dg.materialize([one], instance=instance).success
            assert instance.get_latest_materialization_event(dg.AssetKey("one")) is not None


def test_only_the_psycopg2_scheme_passes_and_the_url_is_never_repeated() -> None:
    assert postgres_url_problem("postgresql+psycopg2://u:secret@h:5432/d", "storage") is None
    problem = postgres_url_problem("postgresql://u:secret@h:5432/d", "storage.postgres.postgres_url")
    assert problem == (
        'storage.postgres.postgres_url: the scheme "postgresql" fails with dagster-postgres on SQLAlchemy 2.1; '
        "write the URL as postgresql+psycopg2://user:password@host:5432/db (docs/deploy.md)"
    )
    assert "secret" not in problem


def test_storage_problems_read_env_urls_by_name_and_every_storage_section(monkeypatch) -> None:
    monkeypatch.setenv("PG_URL_T", "postgres://u:secret@h/d")
    doc = {
        "storage": {"postgres": {"postgres_url": {"env": "PG_URL_T"}}},
        "run_storage": {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage",
                        "config": {"postgres_db": {"username": "u", "hostname": "h", "db_name": "d", "scheme": "postgresql"}}},
    }
    assert storage_problems(doc) == [
        'storage.postgres.postgres_url ($PG_URL_T): the scheme "postgres" fails with dagster-postgres on SQLAlchemy 2.1; '
        "write the URL as postgresql+psycopg2://user:password@host:5432/db (docs/deploy.md)",
        'run_storage.config.postgres_db.scheme: "postgresql" fails with dagster-postgres on SQLAlchemy 2.1; '
        "use postgresql+psycopg2",
    ]
    monkeypatch.delenv("PG_URL_T")
    assert storage_problems({"storage": {"postgres": {"postgres_url": {"env": "PG_URL_T"}}}}) == []


def test_dagster_yaml_from_deploy_keeps_postgres_storage_and_refuses_a_bad_url(tmp_path: Path, monkeypatch) -> None:
    config = load_config(lake_config(tmp_path))
    monkeypatch.setenv("INCSYNC_DAGSTER_PG_URL", "postgresql+psycopg2://u@h/d")
    doc = yaml.safe_load(dagster_yaml(config, REPO / "deploy" / "dagster.yaml", dagster_home=tmp_path))
    # The same database for runs, events and schedules; the event log incsync's compact one (docs/deploy.md).
    url = {"postgres_url": {"env": "INCSYNC_DAGSTER_PG_URL"}}
    assert "storage" not in doc
    assert {k: (doc[k]["module"], doc[k]["class"], doc[k]["config"]) for k in ("run_storage", "event_log_storage", "schedule_storage")} == {
        "run_storage": ("incsync.operations.dagster_compat", "PooledPostgresRunStorage", url),
        "event_log_storage": ("incsync.operations.dagster_compat", "CompactPostgresEventLogStorage", url),
        "schedule_storage": ("dagster_postgres.schedule_storage", "PostgresScheduleStorage", url),
    }
    assert doc["run_coordinator"]["class"] == "QueuedRunCoordinator" and doc["run_monitoring"]["enabled"] is True
    assert doc["concurrency"]["runs"]["tag_concurrency_limits"][0] == {
        "key": "incsync/model_destination", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}

    monkeypatch.setenv("INCSYNC_DAGSTER_PG_URL", "postgresql://u:secret@h/d")
    with pytest.raises(ConfigError, match=r"\$INCSYNC_DAGSTER_PG_URL.*postgresql\+psycopg2://") as failed:
        dagster_yaml(config, REPO / "deploy" / "dagster.yaml")
    assert "secret" not in str(failed.value)

    base = tmp_path / "db.yaml"
    base.write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_db": {"username": "u", "hostname": "h", "db_name": "d"}}}}))
    assert yaml.safe_load(dagster_yaml(config, base))["event_log_storage"]["config"]["postgres_db"]["scheme"] == "postgresql+psycopg2"


def test_the_cli_refuses_an_instance_with_a_bad_url_before_any_run(tmp_path: Path, monkeypatch) -> None:
    from incsync.operations.instance import dagster_instance

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": "postgresql://u@h/d"}}}))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with pytest.raises(ConfigError, match=r"dagster.yaml: storage.postgres.postgres_url: the scheme \"postgresql\""):
        dagster_instance(lake_config(tmp_path))


def test_a_sqlite_instance_has_no_postgres_url(dagster_instance) -> None:
    assert instance_postgres_url(dagster_instance) is None


# Where the event log's class lived: before incsync had packages, and in ``orchestration`` before the
# operations on runs had a package of their own.
@pytest.mark.parametrize("old_module", ["incsync.dagster_compat", "incsync.orchestration.dagster_compat"])
def test_an_instance_written_before_a_move_is_moved_to_the_event_logs_new_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_module: str
) -> None:
    from incsync.operations.instance import dagster_instance

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    old = (f"telemetry:\n  enabled: false\nevent_log_storage:\n  module: {old_module}\n"
           f"  class: BatchingSqliteEventLogStorage\n  config:\n    base_dir: {home}\n")
    (home / "dagster.yaml").write_text(old)
    with dagster_instance(tmp_path / "incsync.yaml") as instance:
        assert type(instance.event_log_storage).__module__ == "incsync.operations.dagster_compat"
    assert (home / "dagster.yaml").read_text() == old.replace(
        f"module: {old_module}\n", "module: incsync.operations.dagster_compat\n")


def test_a_dagster_yaml_naming_the_event_logs_old_home_still_loads(tmp_path: Path) -> None:
    """dagster-daemon reads a generated dagster.yaml as it is: one written before the event log moved to
    ``incsync.operations`` must still open (the CLI rewrites it; the daemon does not)."""
    import dagster as dg
    import yaml

    from incsync.operations.dagster_compat import event_log_storage_config

    storage = {**event_log_storage_config(tmp_path), "module": "incsync.orchestration.dagster_compat"}
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"event_log_storage": storage}))
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    try:
        assert type(instance.event_log_storage).__name__ == "BatchingSqliteEventLogStorage"
    finally:
        instance.dispose()


def test_the_generated_postgres_instance_keeps_one_connection_per_storage(tmp_path: Path, monkeypatch) -> None:
    """dagster-postgres opens a connection for every call (~3.5 ms each here); the storages `incsync
    dagster-yaml` names keep one between calls: a run opens a few sessions instead of one per call."""
    @dg.asset
    def one() -> int:
        return 1

    config = load_config(lake_config(tmp_path))
    home = tmp_path / "home"
    home.mkdir()
    with postgres_database() as dsn, psycopg.connect(dsn, autocommit=True) as stats:
        name = stats.execute("SELECT current_database()").fetchone()[0]

        def sessions() -> int:  # sessions ever opened to the database, this one's included
            time.sleep(0.6)  # a backend reports its session when it ends
            stats.execute("SELECT pg_stat_clear_snapshot()")
            return int(stats.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()[0])

        def opened_by_three_runs() -> int:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                assert dg.materialize([one], instance=instance).success  # tables created, connections made
                before = sessions()
                for _ in range(3):
                    assert dg.materialize([one], instance=instance).success
                assert instance.get_latest_materialization_event(dg.AssetKey("one")) is not None
                kinds = (type(instance.run_storage).__name__, type(instance.event_log_storage).__name__)
            return sessions() - before, kinds  # the kept connections close with the instance

        monkeypatch.setenv("INCSYNC_DAGSTER_PG_URL", "postgresql+psycopg2://" + dsn.split("://", 1)[1])
        (home / "dagster.yaml").write_text(dagster_yaml(config, REPO / "deploy" / "dagster.yaml", dagster_home=home))
        kept, kinds = opened_by_three_runs()
        assert kinds == ("PooledPostgresRunStorage", "CompactPostgresEventLogStorage")
        # dagster-postgres' own storages, as a hand-written dagster.yaml names them: a connection a call
        (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": {"env": "INCSYNC_DAGSTER_PG_URL"}}}}))
        own, kinds = opened_by_three_runs()
        assert kinds == ("PostgresRunStorage", "PostgresEventLogStorage")
        print(f"sessions opened by three runs: {kept} kept, {own} dagster-postgres' own")
        assert kept <= 4 and own >= 10 * kept, (kept, own)

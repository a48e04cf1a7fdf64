"""The worker's warm-up: generated rows staged once through each JDBC driver of the config's sources,
no table read, and a source it cannot reach logged, never raised."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.sources.jdbc.source import JdbcSource
from incsync.worker.rehearsal import rehearse
from incsync_tests.support.jdbc import jdbc_config, maria_database, pg_database


def test_the_warm_up_stages_generated_rows_through_each_driver(spark, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pg_database() as pg, maria_database() as maria:
        (tmp_path / "pg").mkdir()
        (tmp_path / "maria").mkdir()
        pg_file, maria_file = jdbc_config(tmp_path / "pg", pg), jdbc_config(tmp_path / "maria", maria)
        caplog.set_level(logging.INFO, logger="incsync.worker.rehearsal")
        assert rehearse(spark, load_config(pg_file), rows=1234) == {"db": 1234}
        assert rehearse(spark, load_config(maria_file), rows=1000) == {"db": 1000}
        assert [r.getMessage().split(" in ")[0] for r in caplog.records if "warmed up" in r.getMessage()] == [
            "incsync worker: warmed up 1234 rows through source db's driver",
            "incsync worker: warmed up 1000 rows through source db's driver",
        ]
        # Nothing of the warm-up is left behind, and no table was created or read.
        assert pg.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


def test_the_warm_up_probes_each_column_tenanted_models_schema_once(spark, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    load_query = JdbcSource.load_query

    def counted(self: JdbcSource, *args: object, **kwargs: object) -> object:
        asked.append(str(args[1]))
        return load_query(self, *args, **kwargs)  # type: ignore[arg-type]

    with pg_database() as pg:
        pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, updated_at timestamptz NOT NULL)")
        config = load_config(jdbc_config(tmp_path, pg))
        monkeypatch.setattr(JdbcSource, "load_query", counted)
        rehearse(spark, config, rows=10)
        assert len(asked) == 2 and "generate_series" in asked[0] and "orders" in asked[1]
        schema = JdbcSource(config.source("db")).probe_schema(spark, config.models[0], config.recipients[0])
        assert [f.name for f in schema.fields] == ["id", "organization_id", "updated_at"]
        assert len(asked) == 2  # the transfer's probe found the warm-up's


def test_a_source_it_cannot_reach_is_logged_and_the_warm_up_goes_on(spark, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    with pg_database() as pg:
        file = jdbc_config(tmp_path, pg)
        file.write_text(file.read_text().replace(pg.jdbc_url, "jdbc:postgresql://127.0.0.1:1/nowhere"))
        caplog.set_level(logging.INFO, logger="incsync.worker.rehearsal")
        assert rehearse(spark, load_config(file), rows=100) == {}
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("incsync worker: the warm-up read through source db failed (")
    assert record.getMessage().endswith("); the first transfer starts with a cold JVM")

"""The worker's warm-up: generated rows staged once through each JDBC driver of the config's sources,
no table read, and a source it cannot reach logged, never raised."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from incsync.config.load import load_config
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
        assert [r.getMessage().split(" in ")[0] for r in caplog.records] == [
            "incsync worker: warmed up 1234 rows through source db's driver",
            "incsync worker: warmed up 1000 rows through source db's driver",
        ]
        # Nothing of the warm-up is left behind, and no table was created or read.
        assert pg.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


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

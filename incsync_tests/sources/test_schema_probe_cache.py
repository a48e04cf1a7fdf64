"""A process keeps Spark's JDBC schema of a PostgreSQL relation per the result's description, for every
recipient of a column-tenanted model, and asks Spark again when that changes: a column added, dropped,
retyped, renamed or made NOT NULL is seen by the next probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.sources.jdbc.source import JdbcSource
from incsync.sources.registry import build_source
from incsync_tests.support.jdbc import jdbc_config, pg_database


def test_the_schema_is_kept_per_description_and_asked_again_when_it_changes(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    load_query = JdbcSource.load_query

    def counted(self: JdbcSource, *args: object, **kwargs: object) -> object:
        asked.append(str(args[1]))
        return load_query(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(JdbcSource, "load_query", counted)
    with pg_database() as db:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, amount numeric(12,2), "
                   "updated_at timestamptz(6) NOT NULL)")
        config = load_config(jdbc_config(tmp_path, db, recipients=[
            {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
            {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
        ]))
        model, recipient, other = config.models[0], config.recipients[0], config.recipients[1]
        source = build_source(config.source(model.source))
        assert isinstance(source, JdbcSource)

        def probe() -> list[tuple[str, str]]:
            return [(f.name, f.dataType.simpleString()) for f in source.probe_schema(spark, model, recipient).fields]

        first = probe()
        assert first == [("id", "bigint"), ("organization_id", "string"), ("amount", "decimal(12,2)"),
                         ("updated_at", "timestamp")]
        assert probe() == first
        assert len(asked) == 1  # the same description: Spark's answer kept
        assert [f.name for f in source.probe_schema(spark, model, other).fields] == [n for n, _ in first]
        assert len(asked) == 1  # and shared by every recipient of the column-tenanted model
        assert "org_1" not in asked[0]
        changes = [
            ("ALTER TABLE orders ADD COLUMN note text", ("note", "string")),
            ("ALTER TABLE orders ALTER COLUMN amount TYPE numeric(14,4)", ("amount", "decimal(14,4)")),
            # Spark's JDBC fields are all nullable; the driver's nullability is part of the description all the same.
            ("ALTER TABLE orders ALTER COLUMN note SET NOT NULL", ("note", "string")),
            ("ALTER TABLE orders RENAME COLUMN note TO remark", ("remark", "string")),
        ]
        for n, (statement, field) in enumerate(changes, start=2):
            db.execute(statement)
            assert field in probe(), statement
            assert len(asked) == n, statement
            probe()
            assert len(asked) == n, statement
        db.execute("ALTER TABLE orders DROP COLUMN remark")
        assert probe() == [("id", "bigint"), ("organization_id", "string"), ("amount", "decimal(14,4)"),
                           ("updated_at", "timestamp")]
        assert len(asked) == len(changes) + 2

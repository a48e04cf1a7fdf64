"""Recipients from a PostgreSQL table (recipients_from): validated like the file's, re-read by the sensor."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.config.rows import refused_lines
from incsync.errors import ConfigError
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.sensors import build_recipient_sensor
from incsync_tests.orchestration.test_sensors_schedules import NOW, _defs_with, _evaluate_sensor
from incsync_tests.support.jdbc import pg_database
from incsync_tests.support.lake import lake_config

TABLE = """CREATE TABLE public.incsync_recipients (
    id text PRIMARY KEY, id_in_provider_system text NOT NULL, destination text NOT NULL,
    enabled boolean DEFAULT true, tags jsonb, note text)"""


def _config(tmp_path: Path, jdbc_url: str, user: str, refresh: int = 0) -> Path:
    config = lake_config(
        tmp_path,
        recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "files"}],
        destinations=[{"name": "files", "kind": "object_storage", "path": "./out"}],
    )
    doc = yaml.safe_load(config.read_text())
    doc["sources"].append({"name": "app", "vendor": "postgres", "jdbc_url": jdbc_url, "user": user})
    doc["recipients_from"] = {"source": "app", "table": "public.incsync_recipients", "refresh_seconds": refresh}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def test_recipients_come_from_the_file_and_the_table_and_the_sensor_sees_new_rows(tmp_path: Path, dagster_instance) -> None:
    with pg_database() as db:
        db.execute(TABLE)
        db.execute("""INSERT INTO public.incsync_recipients VALUES
            ('globex', 'org_2', 'files', true, '{"tier": "gold"}', 'x'), ('hooli', 'org_5', 'files', false, NULL, NULL)""")
        config = _config(tmp_path, db.jdbc_url, db.user)

        loaded = load_config(config)
        assert [(r.id, r.id_in_provider_system, r.enabled, r.tags) for r in loaded.recipients] == [
            ("acme", "org_1", True, {}), ("globex", "org_2", True, {"tier": "gold"}), ("hooli", "org_5", False, {}),
        ]
        sensor = build_recipient_sensor(str(config), loaded.models, clock=lambda: NOW)
        defs = _defs_with(sensor=sensor, config_file=config)
        first = _evaluate_sensor(sensor, dagster_instance, defs)
        assert [list(r.partition_keys) for r in first.dynamic_partitions_requests] == [["acme", "globex"]]

        db.execute("INSERT INTO public.incsync_recipients VALUES ('initech', 'org_3', 'files', true, NULL, NULL)")
        second = _evaluate_sensor(sensor, dagster_instance, defs)
        assert [list(r.partition_keys) for r in second.dynamic_partitions_requests] == [["initech"]]
        assert dagster_instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS) == ["acme", "globex", "initech"]


def test_a_bad_row_is_refused_alone_naming_its_table_and_id(tmp_path: Path) -> None:
    """A bad row disables its own recipient only: the file's and the other rows' recipients load."""
    with pg_database() as db:
        db.execute(TABLE)
        db.execute("""INSERT INTO public.incsync_recipients VALUES
            ('bad id', 'org_2', 'files', true, NULL, NULL), ('lost', 'org_3', 'nowhere', true, NULL, NULL),
            ('acme', 'org_9', 'files', true, NULL, NULL), ('globex', 'org_4', 'files', true, '{"tier": "gold!"}', NULL),
            ('initech', 'org_5', 'files', true, NULL, NULL)""")
        config = load_config(_config(tmp_path, db.jdbc_url, db.user))
        assert [(r.id, r.id_in_provider_system) for r in config.recipients] == [("acme", "org_1"), ("initech", "org_5")]
        assert [(row.row, row.recipients) for row in config.refused_rows] == [
            ("acme", ()), ("bad id", ("bad id",)), ("globex", ("globex",)), ("lost", ("lost",))]
        assert refused_lines(config) == [
            'recipients_from (public.incsync_recipients, row id "acme").id: recipient "acme" is already defined by the '
            "file or an earlier row; ids must be unique",
            'recipients_from (public.incsync_recipients, row id "bad id").id: "bad id" must match ^[A-Za-z0-9_-]+$ '
            "(letters, digits, _ and - only)",
            'recipients_from (public.incsync_recipients, row id "globex").tags: tag tier=gold! is invalid: keys and values '
            "must match ^[A-Za-z0-9_-]+$",
            'recipients_from (public.incsync_recipients, row id "lost").destination: "nowhere" is not a configured '
            "destination; known: [files]",
        ]
        db.execute("UPDATE public.incsync_recipients SET id = 'good' WHERE id = 'bad id'")
        db.execute("DELETE FROM public.incsync_recipients WHERE id IN ('lost', 'acme', 'globex')")
        config = load_config(_config(tmp_path, db.jdbc_url, db.user))
    assert ([r.id for r in config.recipients], config.refused_rows) == (["acme", "good", "initech"], ())


def test_an_unreadable_table_says_which_and_why(tmp_path: Path) -> None:
    with pg_database() as db:
        config = _config(tmp_path, db.jdbc_url, db.user)
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"recipients_from: cannot read public.incsync_recipients through source app: "
                                              r'relation "public.incsync_recipients" does not exist'):
            load_config(config)
        assert time.monotonic() - started < 10


def test_a_table_row_lists_its_products_as_an_array_or_json(tmp_path: Path) -> None:
    """A text[] column (or a JSON array in text) is the recipient's products; NULL receives every model."""
    with pg_database() as db:
        db.execute(TABLE.replace("note text)", "note text, products text[])"))
        db.execute("""INSERT INTO public.incsync_recipients VALUES
            ('globex', 'org_2', 'files', true, NULL, NULL, ARRAY['basic']), ('hooli', 'org_5', 'files', true, NULL, NULL, NULL),
            ('umbrella', 'org_6', 'files', true, NULL, NULL, ARRAY['platinum'])""")
        config = _config(tmp_path, db.jdbc_url, db.user)
        doc = yaml.safe_load(config.read_text())
        doc["products"] = [{"name": "basic", "models": ["orders"]}]
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        refused = load_config(config)
        assert [r.id for r in refused.recipients] == ["acme", "globex", "hooli"]
        assert refused_lines(refused) == [
            'recipients_from (public.incsync_recipients, row id "umbrella").products: product "platinum" of recipient '
            "umbrella is not a configured product; known: [basic]; fix its spelling or add it under products:"
        ]
        db.execute("DELETE FROM public.incsync_recipients WHERE id = 'umbrella'")
        assert [(r.id, r.products) for r in load_config(config).recipients] == [
            ("acme", None), ("globex", ["basic"]), ("hooli", None)]

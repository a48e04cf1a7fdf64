"""Destinations kept in a PostgreSQL table beside the recipients table: rows validated by the file's models and
cross-checks, a secret by reference; a bad row is refused alone, naming its table and row, and disables only
the recipients that name it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from incsync.config.destinations import DESTINATION_MODELS
from incsync.config.load import load_config
from incsync.config.rows import refused_lines
from incsync_tests.support.jdbc import PgDatabase, pg_database
from incsync_tests.support.lake import lake_config

RECIPIENTS = """CREATE TABLE public.incsync_recipients (
    id text PRIMARY KEY, id_in_provider_system text NOT NULL, destination text NOT NULL, enabled boolean DEFAULT true)"""
DESTINATIONS = """CREATE TABLE public.incsync_destinations (name text PRIMARY KEY, kind text NOT NULL, fields jsonb,
    secret text)"""
TABLE = "public.incsync_destinations"


def table_config(tmp_path: Path, db: PgDatabase, *, refresh: int = 0) -> Path:
    """A file with one recipient (acme, on the file's object storage) and both tables of ``db``."""
    config = lake_config(
        tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "files"}],
        destinations=[{"name": "files", "kind": "object_storage", "path": "./out/files"}],
    )
    doc = yaml.safe_load(config.read_text())
    doc["sources"].append({"name": "app", "vendor": "postgres", "jdbc_url": db.jdbc_url, "user": db.user})
    doc["recipients_from"] = {"source": "app", "table": "public.incsync_recipients", "destinations_table": TABLE,
                              "refresh_seconds": refresh}
    doc["vault"] = {"path": "./vault.sqlite"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def add_destination(db: PgDatabase, name: str, kind: str, fields: dict | str | None, secret: str | None = None) -> None:
    db.execute("INSERT INTO public.incsync_destinations VALUES (%s, %s, %s::jsonb, %s)",
               [name, kind, json.dumps(fields) if fields is not None else None, secret])


def add_recipient(db: PgDatabase, rid: str, tenant: str, destination: str) -> None:
    db.execute("INSERT INTO public.incsync_recipients VALUES (%s, %s, %s, true)", [rid, tenant, destination])


def test_destinations_come_from_the_table_with_their_secret_by_reference(tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        add_destination(db, "globex_pg", "postgres", {"schema": "globex"}, "vault:globex_pg")
        add_destination(db, "hooli_delta", "delta", {"path": "./out/hooli", "retention_hours": 24})
        add_destination(db, "umbrella_maria", "mariadb", {"user": "incsync", "database": "umbrella"}, "env:UMBRELLA_PW")
        add_recipient(db, "globex", "org_2", "globex_pg")
        add_recipient(db, "hooli", "org_3", "hooli_delta")
        add_recipient(db, "umbrella", "org_4", "umbrella_maria")
        config = load_config(table_config(tmp_path, db))
    assert config.refused_rows == ()
    assert [(r.id, r.destination) for r in config.recipients] == [
        ("acme", "files"), ("globex", "globex_pg"), ("hooli", "hooli_delta"), ("umbrella", "umbrella_maria")]
    globex = config.destination("globex_pg")
    assert (str(globex.dsn_secret), globex.dsn_secret.vault.path) == ("vault:globex_pg", str(tmp_path / "vault.sqlite"))
    assert config.destination("hooli_delta").path == str(tmp_path / "out" / "hooli")  # relative to the file, as the file's
    assert config.destination("hooli_delta").retention_hours == 24
    assert str(config.destination("umbrella_maria").password_secret) == "env:UMBRELLA_PW"


def test_a_bad_destination_row_disables_only_the_recipients_that_name_it(tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        add_destination(db, "a_typo", "postgres", {"schem": "globex"}, "vault:globex_pg")
        add_destination(db, "b_oracle", "oracle", {"path": "./x"})
        add_destination(db, "c_secret", "delta", {"path": "./out/c"}, "vault:c")
        add_destination(db, "d_pasted", "postgres", {"schema": "d"}, "postgresql://app:Zq9-pasted@db/app")
        add_destination(db, "e_list", "delta", ["./out/e"])
        add_destination(db, "f_inside", "delta", {"path": "./out/files/f"})
        add_destination(db, "files", "delta", {"path": "./out/other"})
        add_destination(db, "g_good", "delta", {"path": "./out/g"})
        for rid, destination in [("r_a", "a_typo"), ("r_b", "b_oracle"), ("r_c", "c_secret"), ("r_d", "d_pasted"),
                                 ("r_e", "e_list"), ("r_f", "f_inside"), ("r_g", "g_good"), ("r_g2", "g_good")]:
            add_recipient(db, rid, f"org_{rid}", destination)
        config = load_config(table_config(tmp_path, db))
    assert [r.id for r in config.recipients] == ["acme", "r_g"]
    files = tmp_path / "out" / "files"
    label = 'destinations_table (public.incsync_destinations, row name "{}")'.format
    assert refused_lines(config) == [
        f'{label("a_typo")}.schema: required field is missing; add it (docs/config.md lists every field)',
        f'{label("a_typo")}.schem: unknown field; did you mean "schema"?',
        f"{label('a_typo')}: so recipient(s) r_a are disabled until it is fixed",
        f'{label("b_oracle")}: kind "oracle" is unknown; use one of {", ".join(DESTINATION_MODELS)}',
        f"{label('b_oracle')}: so recipient(s) r_b are disabled until it is fixed",
        f"{label('c_secret')}.secret: a delta destination takes no secret; leave it NULL",
        f"{label('c_secret')}: so recipient(s) r_c are disabled until it is fixed",
        f"{label('d_pasted')}.dsn_secret: must be a reference, `vault:<entry>` (an entry of the vault) or "
        "`env:<VARIABLE>` (an environment variable's name); never the secret itself (docs/secrets.md)",
        f"{label('d_pasted')}: so recipient(s) r_d are disabled until it is fixed",
        f'{label("e_list")}.fields: expected a JSON object of the kind\'s fields, e.g. {{"schema": "acme"}}',
        f"{label('e_list')}: so recipient(s) r_e are disabled until it is fixed",
        f'{label("files")}.name: a destination named "files" is already defined by the file or an earlier row; names '
        "must be unique",
        'recipients_from (public.incsync_recipients, row id "r_g2").destination: "g_good" already holds recipient '
        "r_g's copy; a delta destination holds one recipient's copy, so give r_g2 a destination of its own",
        f'{label("f_inside")}: "f_inside" (recipient r_f) writes inside the location of "files" (recipient acme): '
        f"{files}/f lies inside {files}; a delta destination holds one recipient's copy, so give \"f_inside\" a "
        "location of its own",
        f"{label('f_inside')}: so recipient(s) r_f are disabled until it is fixed",
    ]
    assert "Zq9" not in "\n".join(refused_lines(config))


def test_a_file_recipient_may_name_a_table_destination(tmp_path: Path) -> None:
    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        add_destination(db, "acme_delta", "delta", {"path": "./out/acme"})
        file = table_config(tmp_path, db)
        doc = yaml.safe_load(file.read_text())
        doc["recipients"][0]["destination"] = "acme_delta"
        file.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert load_config(file).destination(load_config(file).recipient("acme").destination).kind == "delta"
        db.execute("UPDATE public.incsync_destinations SET fields = '{\"path\": 3}'")
        config = load_config(file)
    assert (config.recipients, [row.recipients for row in config.refused_rows]) == ([], [("acme",)])


def test_a_load_that_finds_both_tables_unchanged_reuses_the_last_and_any_change_is_read(
        tmp_path: Path, monkeypatch) -> None:
    """A sensor tick over 10,000 table rows used to read and validate them all each time (~1 s); the database's
    digest of both tables now tells it nothing changed. Any changed row, the file or the environment loads again."""
    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        add_destination(db, "globex_pg", "postgres", {"schema": "globex"}, "vault:globex_pg")
        add_recipient(db, "globex", "org_2", "globex_pg")
        config_file = table_config(tmp_path, db)
        first = load_config(config_file)
        assert load_config(config_file) is first
        db.execute("""UPDATE public.incsync_destinations SET fields = '{"schema": "globex_v2"}'""")
        second = load_config(config_file)
        assert second is not first and second.destination("globex_pg").schema_name == "globex_v2"
        assert load_config(config_file) is second
        db.execute("UPDATE public.incsync_recipients SET enabled = false")
        third = load_config(config_file)
        assert [(r.id, r.enabled) for r in third.recipients] == [("acme", True), ("globex", False)]
        monkeypatch.setenv("INCSYNC_TEST_UNRELATED", "1")
        assert load_config(config_file) is not third
        config_file.write_text(config_file.read_text().replace("refresh_seconds: 0", "refresh_seconds: 5"))
        assert load_config(config_file).recipients_from.refresh_seconds == 5

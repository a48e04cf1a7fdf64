"""`incsync validate` catches mistakes (issue 16): lake columns from the files without --connect, unset
variables warned, every message `file:line: path: problem — fix` (pydantic's and YAML's included),
--connect checking every model against its source, sources in parallel."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from incsync.cli.main import main
from incsync_tests.cli.test_cli import CSV, HAND_WRITTEN
from incsync_tests.support.lake import lake_config, order, ts, write_table


def _line(file: Path, needle: str, nth: int = 0) -> int:
    """The 1-based line of the ``nth`` line of ``file`` holding ``needle``."""
    return [i + 1 for i, line in enumerate(file.read_text().splitlines()) if needle in line][nth]


def _validate(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["validate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_misspelt_key_or_column_of_a_lake_table_is_caught_without_connect(tmp_path: Path, capsys) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1))])
    file = lake_config(tmp_path, model={"primary_key": ["idd"], "columns": None, "last_modified_column": "updatedat"})
    code, out, err = _validate(capsys, "-c", str(file))
    assert (code, out) == (2, "")
    folder = tmp_path / "src" / "orders"
    assert err.splitlines() == [
        f'error: {file}:{_line(file, "primary_key")}: models[0].primary_key: column "idd" is not in lake table {folder} — did you mean "id"?',
        f'error: {file}:{_line(file, "last_modified_column")}: models[0].last_modified_column: column "updatedat" is not in lake table {folder} — '
        'did you mean "updated_at"?',
    ]
    # CSV: the header line is the schema
    (tmp_path / "exports" / "invoices").mkdir(parents=True)
    (tmp_path / "exports" / "invoices" / "invoices.csv").write_text(CSV)
    csv_file = tmp_path / "hand.yaml"
    csv_file.write_text(HAND_WRITTEN.replace("[invoice_no, tenant, total, modified]", "[invoice_no, tenant, totl, modified]"))
    code, out, err = _validate(capsys, "-c", str(csv_file))
    assert (code, err) == (2, f'error: {csv_file}:13: models[0].columns: column "totl" is not in lake table '
                              f'{tmp_path / "exports" / "invoices"} — did you mean "total"?\n')


def test_unset_variables_are_warned_and_a_missing_destination_folder_is_fine(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("APP_DB_PASSWORD", raising=False)
    monkeypatch.delenv("ACME_DSN", raising=False)
    doc = {
        "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": "jdbc:postgresql://127.0.0.1:5432/app",
                     "user": "reader", "password_env": "APP_DB_PASSWORD"}],
        "destinations": [{"name": "acme_pg", "kind": "postgres", "dsn_env": "ACME_DSN", "schema": "acme"},
                         {"name": "globex_lake", "kind": "delta", "path": "./not/yet/created/globex"}],
        "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "org", "min_start_time_epoch": 0}],
        "recipients": [{"id": "acme", "id_in_provider_system": "1", "destination": "acme_pg"},
                       {"id": "globex", "id_in_provider_system": "2", "destination": "globex_lake"}],
    }
    file = tmp_path / "incsync.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out, err = _validate(capsys, "-c", str(file))
    assert (code, out.splitlines()) == (0, [
        f"{file}: OK (1 sources, 2 destinations, 1 models, 2 recipients)",
        "note: $ACME_DSN is not set, so its destinations were compared by variable name and schema only",
    ])
    assert err.splitlines() == [
        f"warning: {file}:{_line(file, 'password_env')}: sources[0].password_env: variable APP_DB_PASSWORD is not set here — "
        "export APP_DB_PASSWORD=... wherever transfers run",
        f"warning: {file}:{_line(file, 'dsn_env')}: destinations[0].dsn_env: variable ACME_DSN is not set here — "
        "export ACME_DSN=postgresql://... wherever transfers run",
    ]
    (tmp_path / "lake").mkdir()
    lake_file = lake_config(tmp_path / "lake", destinations=[{"name": "acme_delta", "kind": "delta", "path": "./a/b/c/acme"}])
    write_table(tmp_path / "lake" / "src", "orders", [order(1, "org_1", ts(1))])
    code, out, err = _validate(capsys, "--connect", "-c", str(lake_file))
    assert (code, err) == (0, ""), err  # the first transfer creates the folders
    assert out.splitlines()[-1] == "every source and destination answered"


def test_a_file_dagster_cannot_load_is_refused_with_dagsters_reason(tmp_path: Path, capsys) -> None:
    """validate loads the definitions as `dagster dev` does: a model named like incsync's own job passes every
    check of the file, and Dagster refuses the code location."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1))])
    file = lake_config(tmp_path, model={"model_name": "incsync_maintenance"})
    code, out, err = _validate(capsys, "-c", str(file))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: {file}: Dagster cannot load this file's definitions (DagsterInvalidDefinitionError: Duplicate job "
        "definition found for job 'incsync_maintenance'), so `dagster dev`, the daemon and every schedule and sensor "
        "would stop — change what it names (a model's job is named after the model, its asset's op "
        "<source>__<model>; incsync's own jobs are incsync_maintenance and incsync_audit), or report an incsync bug "
        "if it names nothing of the file",
    ]
    code, out, err = _validate(capsys, "--json", "-c", str(file))
    assert (code, out, err.count("\n"), "Duplicate job definition" in err) == (2, "", 1, True)


def test_pydantic_and_yaml_messages_cite_the_file_and_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        HAND_WRITTEN.replace("primary_key: [invoice_no]", "primay_key: [invoice_no]")
        .replace("vendor: lake", "vendor: lakes")
        .replace("min_start_time_epoch: 1704067200", "min_start_time_epoch: soon")
    )
    code, out, err = _validate(capsys, "-c", str(bad))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f'error: {bad}:3: sources[0]: vendor "lakes" is unknown — use one of lake, postgres, mysql, mariadb',
        f"error: {bad}:10: models[0].primary_key: required field is missing — add it (docs/config.md lists every field)",
        f'error: {bad}:18: models[0].min_start_time_epoch: expected a whole number, got "soon"',
        f'error: {bad}:14: models[0].primay_key: unknown field — did you mean "primary_key"?',
    ]
    broken = tmp_path / "broken.yaml"
    broken.write_text("sources:\n  - name: x\n   vendor: lake\n")
    code, out, err = _validate(capsys, "-c", str(broken))
    assert (code, err) == (2, f"error: {broken}:3: not valid YAML: while parsing a block collection did not find "
                              "expected '-' indicator — check the indentation and quoting at column 4\n")
    assert "<unicode string>" not in err


def test_connect_checks_every_model_of_ten_sources_in_parallel(tmp_path: Path, capsys, monkeypatch) -> None:
    from incsync_tests.support.jdbc import pg_database

    with pg_database() as db:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, org text, amount numeric, updated_at timestamptz)")
        doc = {"sources": [], "destinations": [], "models": [], "recipients": []}
        for i in range(10):
            doc["sources"].append({"name": f"db{i}", "vendor": "postgres", "jdbc_url": db.jdbc_url, "user": db.user})
            doc["models"].append({
                "model_name": f"orders{i}", "source": f"db{i}", "source_table": "public.orders",
                "columns": ["id", "org", "amount" if i != 7 else "amont", "updated_at"],
                "primary_key": ["id"], "last_modified_column": "updated_at", "organization_column": "org",
                "min_start_time_epoch": 0,
            })
        doc["destinations"].append({"name": "acme_delta", "kind": "delta", "path": "./out/acme"})
        doc["recipients"].append({"id": "acme", "id_in_provider_system": "1", "destination": "acme_delta"})
        file = tmp_path / "incsync.yaml"
        file.write_text(yaml.safe_dump(doc, sort_keys=False))
        started = time.perf_counter()
        code, out, err = _validate(capsys, "--connect", "-c", str(file))
        took = time.perf_counter() - started
    assert code == 1
    warnings = sorted(line for line in err.splitlines() if line.startswith("warning:"))
    assert warnings == sorted(  # the test's user is a superuser: said, as a transfer would say it
        f"warning: source db{i}: user {db.user} can write to public.orders; incsync only reads, so grant it SELECT only"
        for i in range(10)
    )
    *errors, log_line = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert log_line.startswith(f"Dagster's and Spark's output: {tmp_path / '.dagster' / 'logs'}/incsync-validate-")
    assert errors == [
        f'error: {file}:{_line(file, "columns:", 7)}: models[7].columns: column "amont" is not in table public.orders of source db7 — '
        'did you mean "amount"?'
    ]
    assert took <= 5.0, f"validate --connect took {took:.2f} s for 10 sources"


@pytest.mark.parametrize("vendor", ["lake"])
def test_validate_json_lists_warnings(tmp_path: Path, capsys, vendor: str) -> None:
    import json

    file = lake_config(tmp_path)  # no file in the lake table yet: a warning, not an error
    code, out, _ = _validate(capsys, "--json", "-c", str(file))
    doc = json.loads(out)
    assert (code, doc["ok"], doc["problems"]) == (0, True, [])
    assert doc["warnings"] == [
        f"{file}:{_line(file, 'source_table')}: models[0].source_table: lake table {tmp_path / 'src' / 'orders'} has no parquet file yet — "
        "its columns are checked once it has one"
    ]


def test_validate_names_each_refused_table_row_and_loads_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from incsync_tests.config.test_destinations_table import (
        DESTINATIONS,
        RECIPIENTS,
        add_destination,
        add_recipient,
        table_config,
    )
    from incsync_tests.support.jdbc import pg_database

    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        add_destination(db, "globex_pg", "postgres", {"schema": "globex", "schem": "x"}, "vault:globex_pg")
        add_destination(db, "hooli_delta", "delta", {"path": "./out/hooli"})
        add_recipient(db, "globex", "org_2", "globex_pg")
        add_recipient(db, "hooli", "org_3", "hooli_delta")
        file = table_config(tmp_path, db)
        assert main(["validate", "-c", str(file)]) == 1
    label = 'destinations_table (public.incsync_destinations, row name "globex_pg")'
    line = _line(file, "recipients_from")
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {file}:{_line(file, 'source_table')}: models[0].source_table: lake table {tmp_path / 'src' / 'orders'} "
        "has no parquet file yet — its columns are checked once it has one",
        f"warning: {file}:{_line(file, 'vault')}: vault.key_env: variable INCSYNC_VAULT_KEY is not set here — export "
        "the vault's keys in it wherever transfers run (docs/secrets.md)",
        f'error: {file}:{line}: {label}.schem: unknown field — did you mean "schema"?',
        f"error: {file}:{line}: {label}: so recipient(s) globex are disabled until it is fixed",
        f"{file}: 1 table row(s) refused, the rest loads (2 sources, 2 destinations, 1 models, 2 recipients)",
    ]

"""DuckDB destination, what is its own beyond the conformance suite: the column types it creates
(docs/types.md), a recipient's view through a widening, the one-writer file lock and a path that cannot
be the database file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incsync.core.blame import Blame, Party, blame
from incsync.errors import PublishError
from incsync_tests.arrow_transfer import run
from incsync_tests.destination_support import Target, destination_spec
from incsync_tests.destinations.conformance.test_schema import BASE, TYPED, TYPED_ROWS, _row, _set
from incsync_tests.support import lake_config, order, ts, write_table

SOURCE = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)), order(4, "org_1", ts(2, 10))]


def _configure(root: Path, rows: list[dict], schema: pa.Schema | None = None, **destination: Any) -> Path:
    write_table(root / "src", "orders", rows, **({"schema": schema} if schema is not None else {}))
    return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                       destinations=[{**destination_spec("duckdb"), **destination}],
                       model={"columns": None, "lookback_seconds": 0})


def _describe(target: Target) -> dict[str, str]:
    with target.destination.connect() as con:
        return {name: kind for name, kind, *_ in con.execute("DESCRIBE orders").fetchall()}


def test_the_table_takes_duckdbs_own_types(tmp_path: Path) -> None:
    config = _configure(tmp_path, TYPED_ROWS, TYPED)
    run(config, "2024-01-01", scheduled=False)
    assert _describe(Target(config)) == {
        "id": "BIGINT", "organization_id": "VARCHAR", "updated_at": "TIMESTAMP WITH TIME ZONE", "i16": "SMALLINT",
        "i32": "INTEGER", "i64": "BIGINT", "f64": "DOUBLE", "flag": "BOOLEAN", "d38": "DECIMAL(38,0)",
        "d38_10": "DECIMAL(38,10)", "d12_2": "DECIMAL(12,2)", "text": "VARCHAR", "bytes": "BLOB", "day": "DATE",
        "at": "TIMESTAMP WITH TIME ZONE",
    }


def test_a_decimal_past_38_digits_is_its_exact_text(tmp_path: Path) -> None:
    from decimal import Decimal

    schema = BASE.append(pa.field("big", pa.decimal256(50, 10)))
    value = Decimal("-" + "9" * 40 + "." + "0" * 9 + "1")
    config = _configure(tmp_path, [_row(1, 1, big=value)], schema)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    assert _describe(target)["big"] == "VARCHAR"
    assert [r["big"] for r in target.rows()] == ["-" + "9" * 40 + ".0000000001"]


def test_a_recipients_view_survives_a_widening(tmp_path: Path) -> None:
    config = _configure(tmp_path, [_row(1, 1, qty=7)], BASE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    with target.destination.connect() as con:
        con.execute("CREATE VIEW big_qty AS SELECT id, qty FROM orders WHERE qty > 5")
    write_table(tmp_path / "src", "orders", [_row(1, 1, qty=7), _row(2, 2, qty=5_000_000_000)],
                schema=_set(BASE, "qty", pa.int64()))
    outcome = run(config, "2024-01-01", scheduled=True)
    assert outcome.destination_metadata["schema_change"] == "widened qty integer→bigint"
    with target.destination.connect() as con:
        assert con.execute("SELECT id, qty FROM big_qty ORDER BY id").fetchall() == [(1, 7), (2, 5_000_000_000)]


def test_a_duckdb_file_another_process_holds_open_fails_the_publish_naming_the_fix(
        tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = target.state()
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('open', "
                               "flush=True); sys.stdin.read()", target.destination.path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(PublishError) as info:
            run(config, "2024-01-02", scheduled=False)
        assert "Could not set lock on file" in str(info.value)
        assert str(info.value).endswith("DuckDB lets one process open a file to write, so readers must close it (or read a "
                                        "copy) while transfers run.")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert target.state() == before
    assert run(config, "2024-01-02", scheduled=False).record.rows_transferred == 1


@pytest.mark.parametrize("path", ["./not-a-folder/acme.duckdb", "./not-a-folder/deeper/acme.duckdb"],
                         ids=["folder", "grandparent"])
def test_a_file_where_the_duckdb_files_folder_should_be_names_the_destination_and_the_fix(
        tmp_path: Path, path: str) -> None:
    (tmp_path / "not-a-folder").write_text("a file of the recipient's")
    config = _configure(tmp_path, SOURCE, path=path)

    with pytest.raises(PublishError) as info:
        run(config, "2024-01-01", scheduled=False)

    file = tmp_path / path
    assert str(info.value) == (
        f"destination acme_dest: cannot create the DuckDB file {file}: {tmp_path / 'not-a-folder'} is a file, "
        "where a folder should be; the recipient moves that file away, or the provider sets the destination's "
        "`path` elsewhere")
    assert blame(info.value) == Blame(Party.RECIPIENT, (
        "destination acme_dest: a file stands where the destination's folder should be: the recipient must move it "
        "away, or the provider points the destination elsewhere"))
    assert (tmp_path / "not-a-folder").read_text() == "a file of the recipient's"


def test_a_folder_where_the_duckdb_file_should_be_names_the_destination_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "acme.duckdb").mkdir()
    config = _configure(tmp_path, SOURCE, path="./acme.duckdb")

    with pytest.raises(PublishError) as info:
        run(config, "2024-01-01", scheduled=False)

    assert str(info.value) == (
        f"destination acme_dest: the DuckDB file {tmp_path / 'acme.duckdb'} is a folder; the recipient moves that "
        "folder away, or the provider sets the destination's `path` to a database file")
    assert blame(info.value) == Blame(Party.RECIPIENT, (
        "destination acme_dest: a folder stands where the destination's file should be: the recipient must move it "
        "away, or the provider points the destination elsewhere"))
    assert list((tmp_path / "acme.duckdb").iterdir()) == []

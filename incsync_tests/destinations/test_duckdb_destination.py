"""DuckDB destination, what is its own beyond the conformance suite: the column types it creates
(docs/types.md), a recipient's view through a widening, the one-writer file lock (waited for, up to
`lock_timeout_seconds`) and a path that cannot be the database file."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pytest

from incsync.core.blame import Blame, Party, blame
from incsync.errors import PublishError
from incsync_tests.destinations.conformance.test_schema import BASE, TYPED, TYPED_ROWS, _row, _set
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

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


# A recipient's reader as a separate process (DuckDB locks the file per process): it holds the file open
# read-only for `hold` seconds, then opens it, reads and closes it every 50 ms until its stdin closes, and
# prints how many reads it made. An open refused while a publish holds the file is skipped, as a dashboard
# keeps its last result and polls again.
READER = """
import sys, threading, time
import duckdb

path, hold = sys.argv[1], float(sys.argv[2])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
con = duckdb.connect(path, read_only=True)
con.execute("SELECT count(*) FROM orders").fetchall()
print("open", flush=True)
done.wait(hold)
con.close()
reads = 0
while not done.is_set():
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.IOException:
        pass
    else:
        con.execute("SELECT count(*) FROM orders").fetchall()
        con.close()
        reads += 1
    time.sleep(0.05)
print(reads, flush=True)
"""


class Reader:
    """A ``READER`` process on ``path`` for the ``with`` block; ``reads`` after it: the polls that read."""

    def __init__(self, path: str, *, hold: float):
        self.process = subprocess.Popen([sys.executable, "-c", READER, path, str(hold)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.reads = -1

    def __enter__(self) -> Self:
        assert self.process.stdout.readline().strip() == "open"
        return self

    def __exit__(self, *exc: object) -> None:
        out, _ = self.process.communicate(input="", timeout=60)
        assert self.process.returncode == 0
        self.reads = int(out.split()[-1])


def test_a_reader_polling_the_file_delays_a_publish_but_does_not_fail_it(tmp_path: Path) -> None:
    """The reader holds the file through the transfer's first attempt to open it (so the run without a wait
    fails every time), then polls it as a dashboard does, through a full refresh and an incremental run."""
    config = _configure(tmp_path, SOURCE[:3])
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    write_table(tmp_path / "src", "orders", [SOURCE[0], SOURCE[3]])  # the source deleted order 2

    with Reader(target.destination.path, hold=1.0) as refresh_reader:
        refreshed = run(config, "2024-01-01", scheduled=False, full_refresh=True)
    with Reader(target.destination.path, hold=1.0) as incremental_reader:
        incremental = run(config, "2024-01-02", scheduled=False)

    assert (refreshed.record.transfer_type, refreshed.destination_metadata["duckdb_rows_deleted"]) == ("FULL_REFRESH", 1)
    assert (incremental.record.transfer_type, incremental.record.rows_transferred) == ("INCREMENTAL", 1)
    assert [(r["id"], r["updated_at"]) for r in target.rows()] == [(1, ts(1, 1)), (4, ts(2, 10))]
    assert refresh_reader.reads > 0 and incremental_reader.reads > 0


def test_a_reader_holding_the_file_past_the_lock_timeout_fails_the_publish_saying_how_long_it_waited(
        tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE, lock_timeout_seconds=0.5)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    before = (target.state(), target.rows())

    with Reader(target.destination.path, hold=3600):
        started = time.monotonic()
        with pytest.raises(PublishError) as info:
            run(config, "2024-01-02", scheduled=False)
        waited = time.monotonic() - started

    path = target.destination.path
    assert re.fullmatch(
        re.escape(f"destination acme_dest: cannot open the DuckDB file {path} to write: another process held it "
                  "open for the 0.5 s this transfer waited (lock_timeout_seconds) (") + r"IO Error: Could not set lock .*"
        + re.escape("); readers must close the file while transfers run (or read a copy), or raise the "
                    "destination's lock_timeout_seconds"),
        str(info.value)), str(info.value)
    assert 0.5 <= waited < 10
    assert (target.state(), target.rows()) == before
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

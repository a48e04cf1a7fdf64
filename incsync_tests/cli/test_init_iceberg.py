"""A new user's path to an Iceberg table (and to a DuckDB file): `incsync init --destination iceberg`, `incsync transfer`, and
pyiceberg reading the table back (DuckDB's iceberg_scan would need an extension download; pyiceberg needs none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from incsync.cli.main import main
from incsync_tests.support.lake import order, ts, write_table

SOURCE = [
    order(1, "org_1", ts(1, 1), amount=10.5),
    order(2, "org_1", ts(1, 2, 30, 0, 1), status="paid"),
    order(3, "org_2", ts(1, 3)),
    order(4, "org_1", ts(2, 4), amount=4.0),
]


def _iceberg_rows(warehouse: Path, identifier: str) -> list[dict]:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("incsync", uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri())
    table = catalog.load_table(identifier)
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def _init_and_transfer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                       destination: str) -> Path:
    """`incsync init --destination DESTINATION`, `validate`, then the two windows of SOURCE for acme."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    file = tmp_path / "incsync.yaml"
    assert main(["init", "--source", "lake", "--destination", destination, "-o", str(file)]) == 0
    write_table(tmp_path / "data", "orders", SOURCE)
    assert main(["validate", "-c", str(file)]) == 0
    for window in ("2024-01-01", "2024-01-02"):
        assert main(["transfer", "orders", "--recipient", "acme", "--window", window, "-c", str(file)]) == 0
    out = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("orders")]
    assert [(line[2], line[3]) for line in out] == [("2024-01-01", "rows_transferred=2"), ("2024-01-02", "rows_transferred=1")]
    return file


def test_init_then_transfer_reaches_an_iceberg_table_pyiceberg_reads(tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    file = _init_and_transfer(tmp_path, monkeypatch, capsys, "iceberg")
    want = sorted((r for r in SOURCE if r["organization_id"] == "org_1"), key=lambda r: r["id"])
    assert _iceberg_rows(tmp_path / "out" / "acme_iceberg", "acme.orders") == want

    # A changed row and a re-run: the table holds each key once, with the newest values.
    changed = [*SOURCE[:3], order(4, "org_1", ts(2, 5), status="shipped", amount=4.0)]
    write_table(tmp_path / "data", "orders", changed)
    for _ in range(2):
        assert main(["transfer", "orders", "--recipient", "acme", "--window", "2024-01-02", "-c", str(file)]) == 0
    want = sorted((r for r in changed if r["organization_id"] == "org_1"), key=lambda r: r["id"])
    assert _iceberg_rows(tmp_path / "out" / "acme_iceberg", "acme.orders") == want


def test_init_then_transfer_reaches_a_duckdb_file_duckdb_reads(tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The same path to a DuckDB file: `incsync init --destination duckdb`, `incsync transfer`, and DuckDB
    itself reading the table, as the recipient would."""
    import duckdb

    _init_and_transfer(tmp_path, monkeypatch, capsys, "duckdb")
    with duckdb.connect(str(tmp_path / "out" / "acme.duckdb"), read_only=True) as con:
        got = con.sql("SELECT * FROM main.orders ORDER BY id").to_arrow_table().to_pylist()
    want = sorted((r for r in SOURCE if r["organization_id"] == "org_1"), key=lambda r: r["id"])
    assert got == want

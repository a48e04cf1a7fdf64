"""End to end from the command line: `incsync init --destination mariadb`, then `incsync transfer` into a
MariaDB database, read back by a recipient's own SQL client with exact rows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from incsync.cli.main import main
from incsync_tests.support.destinations import mariadb_admin, mariadb_databases
from incsync_tests.support.lake import order, ts, write_table

ROWS = [
    order(1, "org_1", ts(1, 1, 0, 0, 1), status="new", amount=10.5),
    order(2, "org_1", ts(2, 23, 59, 59, 999_999), status="Paid ", amount=-0.25),
    order(3, "org_2", ts(1, 3), status="secret"),
    order(4, "org_1", ts(2, 6), status="naïve 🚀", amount=1e-9),
]


def _select(database: str) -> list[tuple]:
    admin = mariadb_admin()
    try:
        with admin.cursor() as cur:
            cur.execute(f"SELECT id, organization_id, status, amount, updated_at FROM `{database}`.`orders` ORDER BY id")
            return list(cur.fetchall())
    finally:
        admin.close()


def test_init_then_transfer_into_a_mariadb_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    file = tmp_path / "incsync.yaml"
    assert main(["init", "--source", "lake", "--destination", "mariadb", "-o", str(file)]) == 0
    write_table(tmp_path / "data", "orders", ROWS)
    with mariadb_databases() as prefix:
        database = f"{prefix}_acme"
        text = file.read_text()
        for typed, mine in (("user: incsync_writer", "user: root"), ("database: acme ", f"database: {database} ")):
            assert typed in text
            text = text.replace(typed, mine)
        file.write_text("\n".join(line for line in text.splitlines() if "password_env: ACME_MARIADB" not in line) + "\n")
        assert main(["validate", "-c", str(file)]) == 0
        capsys.readouterr()

        assert main(["transfer", "orders", "--recipient", "acme", "--from", "2024-01-01", "--to", "2024-01-02",
                     "-c", str(file)]) == 0
        assert _select(database) == [
            (1, "org_1", "new", 10.5, datetime(2024, 1, 1, 1, 0, 0, 1)),
            (2, "org_1", "Paid ", -0.25, datetime(2024, 1, 2, 23, 59, 59, 999_999)),
            (4, "org_1", "naïve 🚀", 1e-9, datetime(2024, 1, 2, 6)),
        ]

        ROWS[0] = order(1, "org_1", ts(2, 7), status="shipped", amount=10.5)
        write_table(tmp_path / "data", "orders", ROWS)
        assert main(["transfer", "orders", "--recipient", "acme", "--window", "2024-01-02", "-c", str(file)]) == 0
        assert _select(database)[0] == (1, "org_1", "shipped", 10.5, datetime(2024, 1, 2, 7))
        assert main(["state", "orders", "--recipient", "acme", "-c", str(file)]) == 0
        out = capsys.readouterr().out
        assert "2024-01-02T23:59:59.999999+00:00" in out, out

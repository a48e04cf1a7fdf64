"""Tenant values real applications produce, in ONE fan-out run from real PostgreSQL and MariaDB: each
recipient gets exactly its rows, and a recipient whose own rows fail fails alone, named.

MariaDB compares by the column's collation (``utf8mb4_general_ci``: case-insensitive, PAD SPACE), so its
``IN (...)`` returns ``Acme`` and ``  padded`` rows too; incsync keeps each recipient's value exactly, so
``acme`` and ``ACME`` stay two tenants and the look-alikes reach nobody.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.core.vendor_sql import mysql_literal
from incsync.destinations.registry import build_destination
from incsync.orchestration.io_manager import transfer_failure
from incsync.sources.registry import build_source
from incsync.transfer.errors import EngineError, named_error
from incsync.transfer.execute import execute
from incsync.transfer.request import TransferRun
from incsync_tests.support.jdbc import jdbc_config, maria_database, pg_database
from incsync_tests.support.lake import delta_rows, ts

TENANTS = {
    "quote": "o'brien",
    "inject": "') OR ('1'='1",
    "comment": "a;b--",
    "backslash": "back\\slash",
    "unicode": "Zürich-東京-🙂",
    "padded": "  padded  ",
    "lower": "acme",
    "upper": "ACME",
    "long": "ü" * 250 + "-long",  # exactly 255 characters (validate's limit), 505 bytes of UTF-8
    "dup": "dup",  # its rows break the model's key: it fails, alone
}
# Nobody's tenant; each equals one of the above under MariaDB's case-insensitive, PAD SPACE collation.
LOOK_ALIKES = ["Acme", "  padded", "O'BRIEN ", "ZÜRICH-東京-🙂"]


def _rows() -> list[tuple[int, str, str]]:
    rows = [(i * 10 + n, tenant, f"{rid}-{n}") for i, (rid, tenant) in enumerate(TENANTS.items()) for n in (1, 2)]
    rows += [(901 + i, tenant, "look-alike") for i, tenant in enumerate(LOOK_ALIKES)]
    return rows + [(91, "dup", "dup-again")]  # id 91 twice for tenant "dup"


def _seed(db) -> None:
    if db.vendor == "postgres":
        db.execute("CREATE TABLE orders (id bigint, organization_id text, status text, updated_at timestamptz(6) NOT NULL)")
        for i, (key, tenant, status) in enumerate(_rows()):
            db.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)", (key, tenant, status, ts(1, 1 + i % 20)))
        return
    db.execute("CREATE TABLE orders (id BIGINT, organization_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE "
               "utf8mb4_general_ci, status TEXT, updated_at TIMESTAMP(6) NOT NULL) DEFAULT CHARSET=utf8mb4")
    values = ", ".join(f"({key}, {mysql_literal(tenant)}, '{status}', '{ts(1, 1 + i % 20):%Y-%m-%d %H:%M:%S.%f}')"
                       for i, (key, tenant, status) in enumerate(_rows()))
    db.execute(f"SET time_zone = '+00:00'; INSERT INTO orders VALUES {values};")


@pytest.mark.parametrize("vendor", ["postgres", "mariadb"])
def test_hostile_tenant_values_in_one_fan_out_run(
    vendor: str, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("incsync.transfer.reads.COLLECT_MAX_ROWS", 0)  # PostgreSQL's small read too: Spark's write job
    with pg_database() if vendor == "postgres" else maria_database() as db:
        _seed(db)
        recipients = [{"id": rid, "id_in_provider_system": tenant, "destination": f"{rid}_delta"} for rid, tenant in TENANTS.items()]
        config = load_config(jdbc_config(tmp_path, db, recipients=recipients,
                                         model={"columns": ["id", "organization_id", "status", "updated_at"]}))
        model = config.model("orders")
        run = TransferRun.for_model(config, model, source=build_source(config.source(model.source)), spark=lambda: spark,
                                    scheduled=False)
        requests = [run.request(r, build_destination(config.destination(r.destination)), "2024-01-01") for r in config.recipients]
        committed: list[str] = []
        with caplog.at_level(logging.INFO, logger="incsync.transfer.execute"):
            failures = execute(run.plan(requests), staging_root=tmp_path / "staging",
                               on_commit=lambda request, _outcome: committed.append(request.recipient.id))

    assert "fan-out read of model orders: 21 rows for 10 recipients, staged once" in caplog.text
    assert sorted(committed) == sorted(set(TENANTS) - {"dup"})
    for rid, tenant in TENANTS.items():
        if rid != "dup":
            rows = delta_rows(tmp_path / "out" / rid / "orders")
            assert [(r["organization_id"], r["status"]) for r in rows] == [(tenant, f"{rid}-1"), (tenant, f"{rid}-2")], rid
    assert not (tmp_path / "out" / "dup" / "orders").exists()
    [failure] = failures
    message = transfer_failure("orders", failures).description
    assert failure.recipient_id == "dup" and message.startswith("model orders, recipient dup, window 2024-01-01 not committed: ")
    assert "ValidationError" in message and "91" in message
    assert "Py4J" not in message and "java" not in message.lower()
    assert list((tmp_path / "staging").iterdir()) == []


def test_a_value_that_fails_the_shared_read_fails_only_its_recipient(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A text the model's ``column_types`` says is an integer fails the shared read's conversion, so each
    recipient is read alone, and only the one whose row holds it fails, named, with incsync's message
    rather than Spark's. (PostgreSQL's ``infinity`` no longer fails the read: it is refused per recipient
    at a Delta publish, ``test_infinity_postgres``.)"""
    tenants = {"acme": "org_1", "globex": "org_2", "initech": "org_3"}
    with pg_database() as db:
        db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, organization_id text, due text, "
                   "updated_at timestamptz(6) NOT NULL)")
        for key, tenant, due in [(1, "org_1", "101"), (2, "org_2", "12a"), (3, "org_2", "103"), (4, "org_3", "104")]:
            db.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)", (key, tenant, due, ts(1, key)))
        recipients = [{"id": rid, "id_in_provider_system": t, "destination": f"{rid}_delta"} for rid, t in tenants.items()]
        config = load_config(jdbc_config(tmp_path, db, recipients=recipients,
                                         model={"columns": ["id", "organization_id", "due", "updated_at"],
                                                "column_types": {"due": "integer"}}))
        model = config.model("orders")
        run = TransferRun.for_model(config, model, source=build_source(config.source(model.source)), spark=lambda: spark,
                                    scheduled=False)
        requests = [run.request(r, build_destination(config.destination(r.destination)), "2024-01-01") for r in config.recipients]
        with caplog.at_level(logging.WARNING, logger="incsync.transfer.execute"):
            failures = execute(run.plan(requests), staging_root=tmp_path / "staging", on_commit=lambda *_: None)

    assert "(3 recipients) failed (ConversionError: " in caplog.text and "reading each recipient alone" in caplog.text
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "initech" / "orders")] == [4]
    assert not (tmp_path / "out" / "globex" / "orders").exists()
    assert [f.recipient_id for f in failures] == ["globex"]
    message = transfer_failure("orders", failures).description
    assert message.startswith("model orders, recipient globex, window 2024-01-01 not committed: ConversionError: ")
    assert "holds '12a' (key id=2)" in message
    assert "Py4J" not in message and "java" not in message.lower()
    assert list((tmp_path / "staging").iterdir()) == []


def test_an_engine_error_of_one_recipient_names_it_and_no_java_class(spark) -> None:
    with pytest.raises(Exception) as parse:
        spark._jvm.java.lang.Long.parseLong("org_1")  # a real Py4JJavaError (NumberFormatException)
    with pytest.raises(Exception) as raised:
        spark.sql("SELECT raise_error('tenant org_1: bad row') AS x").collect()
    for caught, words in [(parse.value, 'For input string: "org_1"'), (raised.value, "tenant org_1: bad row")]:
        error = named_error(caught, model="orders", recipient="acme")
        assert isinstance(error, EngineError) and error.__cause__ is caught
        assert str(error).startswith("model orders, recipient acme: Spark failed: ") and words in str(error)
        assert "java" not in str(error).lower() and "Exception" not in str(error) and "error occurred while calling" not in str(error)
    kept = ValueError("not Spark's")
    assert named_error(kept, model="orders", recipient="acme") is kept

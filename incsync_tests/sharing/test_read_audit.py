"""The read audit: each read through a share, by the official client, lands in the transfer log's warehouse as a
``share_reads`` row when ``audit:`` is set, and is a line of the server's log otherwise."""

from __future__ import annotations

import logging
from pathlib import Path

import delta_sharing
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from incsync.config.load import load_config
from incsync.destinations.ownership import OWNER_PROPERTY, Owner
from incsync.sharing import delta_log
from incsync.sharing.server import ServerThread, build_service, profile, token_store, write_profile
from incsync_tests.sharing.conftest import DAY1, HOUR, IcebergWorld, World
from incsync_tests.support import arrow_transfer
from incsync_tests.support.host import free_port
from incsync_tests.support.lake import lake_config, order, ts, write_table


def _state(root: Path) -> tuple[int, int, int]:
    state = delta_log.table_state(str(root))
    return state.version, len(state.files), sum(f.size for f in state.files)


def test_without_audit_each_read_is_a_line_of_the_servers_log(world: World, caplog: pytest.LogCaptureFixture) -> None:
    version, files, size = _state(world.root / "out/globex/orders")
    with caplog.at_level(logging.INFO, logger="incsync.sharing.reads"):
        frame = delta_sharing.load_as_pandas(world.url("globex"))
    assert len(frame) == sum(1 for r in DAY1 if r["organization_id"] == "org_2")
    lines = [r.getMessage() for r in caplog.records if r.name == "incsync.sharing.reads"]
    token_id = world.minted["globex"].record.id
    assert lines == [f"read query recipient=globex token={token_id} table=globex.sales.orders version={version} "
                     f"files={files} bytes={size}"]
    assert world.token("globex") not in caplog.text


def test_an_iceberg_scan_plan_is_a_read_too(iceberg_world: IcebergWorld, caplog: pytest.LogCaptureFixture) -> None:
    table = iceberg_world.catalog("stark").load_table("sales.orders")
    with caplog.at_level(logging.INFO, logger="incsync.sharing.reads"):
        assert table.scan().to_arrow().num_rows == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "incsync.sharing.reads"]
    planned = [task.file.file_size_in_bytes for task in table.scan().plan_files()]
    assert lines == [f"read scan recipient=stark token={iceberg_world.minted['stark'].record.id} table=stark.sales.orders "
                     f"version={table.current_snapshot().snapshot_id} files={len(planned)} bytes={sum(planned)}"]


DAY2 = [*DAY1, order(4, "org_1", ts(2, 3)), order(1, "org_1", ts(2, 4), status="paid")]


def test_with_audit_each_read_lands_in_share_reads(tmp_path: Path) -> None:
    write_table(tmp_path / "src", "orders", DAY1)
    config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"}],
                         destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme", "change_data_feed": True},
                                       {"name": "warehouse", "kind": "delta", "path": "./out/warehouse"}])
    port = free_port()
    doc = yaml.safe_load(config.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}}
    doc["audit"] = {"destination": "warehouse"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_config(config)

    def transfer(window: str, scheduled: bool) -> None:
        arrow_transfer.run(config, window, scheduled=scheduled, recipient_id="acme", staging_root=tmp_path / "staging")

    transfer("2024-01-01", False)
    first = _state(tmp_path / "out/acme/orders")
    minted = token_store(config, loaded.sharing).create("acme", lifetime_seconds=HOUR)
    write_profile(tmp_path / "acme.share", profile(loaded.sharing, minted))
    url = f"{tmp_path / 'acme.share'}#acme.sales.orders"
    service = build_service(config, loaded)
    with ServerThread(service, port=port):
        assert len(delta_sharing.load_as_pandas(url)) == 2
        write_table(tmp_path / "src", "orders", DAY2)
        transfer("2024-01-02", True)
        second = _state(tmp_path / "out/acme/orders")
        assert len(delta_sharing.load_as_pandas(url)) == 3
        assert len(delta_sharing.load_as_pandas(url, version=first[0])) == 2
        changes = delta_sharing.load_table_changes_as_pandas(url, starting_version=second[0], ending_version=second[0])
        assert len(changes) == 3  # id 1's pre- and post-image, id 4 inserted
    # leaving the server committed what it still held

    table = DeltaTable(str(tmp_path / "out/warehouse/share_reads"))
    rows = sorted(pa.table(table.to_pyarrow_table()).to_pylist(), key=lambda r: r["read_at"])
    changed = delta_log.version_actions(str(tmp_path / "out/acme/orders"), second[0]).cdc
    assert [(r["recipient"], r["token_id"], r["call"], r["share"], r["schema"], r["table"], r["model"], r["version"],
             r["ending_version"], r["files"], r["bytes"]) for r in rows] == [
        ("acme", minted.record.id, "query", "acme", "sales", "orders", "orders", first[0], None, first[1], first[2]),
        ("acme", minted.record.id, "query", "acme", "sales", "orders", "orders", second[0], None, second[1], second[2]),
        ("acme", minted.record.id, "query", "acme", "sales", "orders", "orders", first[0], None, first[1], first[2]),
        ("acme", minted.record.id, "changes", "acme", "sales", "orders", "orders", second[0], second[0], len(changed),
         sum(f.size for f in changed)),
    ]
    assert len({r["id"] for r in rows}) == 4
    assert all(r["read_at"] is not None for r in rows)
    # the log's table is the provider's, like the transfer log's others
    assert Owner.from_json(table.metadata().configuration[OWNER_PROPERTY]).recipient == "incsync_audit"
    assert minted.token not in str(rows)


def test_a_warehouse_that_cannot_be_written_keeps_the_reads_for_the_next_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A PostgreSQL warehouse (the provider's usual one), its DSN's variable unset at first: the commit fails, is
    logged, and the reads stay; once it is set, the next commit writes them all, once."""
    import psycopg

    from incsync.sharing.audit import WarehouseReads
    from incsync.staging.folders import default_staging_dir
    from incsync_tests.support.destinations import postgres_database

    write_table(tmp_path / "src", "orders", DAY1)
    config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"}],
                         destinations=[{"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
                                       {"name": "warehouse", "kind": "postgres", "dsn_env": "INCSYNC_TEST_WAREHOUSE_DSN",
                                        "schema": "incsync_log"}])
    port = free_port()
    doc = yaml.safe_load(config.read_text())
    doc["sharing"] = {"listen": f"127.0.0.1:{port}", "tables": {"orders": {"schema": "sales"}}}
    doc["audit"] = {"destination": "warehouse"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_config(config)
    arrow_transfer.run(config, "2024-01-01", scheduled=False, recipient_id="acme", staging_root=tmp_path / "staging")
    version, files, size = _state(tmp_path / "out/acme/orders")
    minted = token_store(config, loaded.sharing).create("acme", lifetime_seconds=HOUR)
    write_profile(tmp_path / "acme.share", profile(loaded.sharing, minted))
    service = build_service(config, loaded)
    service.audit.close()
    audit = WarehouseReads(lambda: loaded, staging_dir=default_staging_dir, flush_seconds=3600)  # flushed by hand here
    service.audit = audit
    monkeypatch.delenv("INCSYNC_TEST_WAREHOUSE_DSN", raising=False)
    with postgres_database() as dsn, ServerThread(service, port=port):
        for _ in range(2):
            assert len(delta_sharing.load_as_pandas(f"{tmp_path / 'acme.share'}#acme.sales.orders")) == 2
        with caplog.at_level(logging.ERROR, logger="incsync.sharing.audit"):
            assert audit.flush() == 0
        assert [r.getMessage().split(" (")[0] for r in caplog.records if r.name == "incsync.sharing.audit"] == [
            "the read audit could not append 2 read(s) to share_reads"]
        monkeypatch.setenv("INCSYNC_TEST_WAREHOUSE_DSN", dsn)
        assert audit.flush() == 2
        assert audit.flush() == 0  # nothing twice
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT recipient, token_id, call, version, files, bytes FROM incsync_log.share_reads").fetchall()
    assert rows == [("acme", minted.record.id, "query", version, files, size)] * 2

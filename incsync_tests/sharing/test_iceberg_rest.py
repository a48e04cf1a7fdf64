"""pyiceberg's own REST client against `incsync serve`'s Iceberg catalog, over Iceberg tables written by real
transfers: each recipient lists and scans exactly its own copy, after a backfill and an incremental, at a past
snapshot too, reading the data files through the server's storage endpoint as a remote machine would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import EqualTo

from incsync.cli.main import main
from incsync_tests.sharing.conftest import ICEBERG_DAY1, IcebergWorld
from incsync_tests.support.lake import order, ts, write_table

ICEBERG_DAY2 = [order(1, "org_6", ts(2, 1), status="paid"), *ICEBERG_DAY1[1:], order(5, "org_6", ts(2, 3)),
                order(6, "org_7", ts(2, 4))]


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["organization_id"], r["status"], r["amount"], r["updated_at"].isoformat())
                  for r in table.to_pylist())


def expected(source: list[dict[str, Any]], org: str) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["organization_id"], r["status"], r["amount"], r["updated_at"].isoformat())
                  for r in source if r["organization_id"] == org)


def test_each_recipients_catalog_lists_exactly_its_namespace_and_table(iceberg_world: IcebergWorld) -> None:
    for recipient in ("wayne", "stark"):
        catalog = iceberg_world.catalog(recipient)
        assert catalog.list_namespaces() == [("sales",)]
        assert catalog.list_tables("sales") == [("sales", "orders")]
        assert catalog.load_namespace_properties("sales") == {}
        assert catalog.namespace_exists("sales") and not catalog.namespace_exists("default")
        assert catalog.table_exists("sales.orders") and not catalog.table_exists("sales.customers")
        with pytest.raises(NoSuchNamespaceError):
            catalog.list_tables("incsync")  # the provider's namespace is not the recipient's
    delta_only = iceberg_world.catalog("acme")
    assert delta_only.list_namespaces() == []
    with pytest.raises(NoSuchTableError):
        delta_only.load_table("sales.orders")
    shares = iceberg_world.uri.replace("/iceberg", "/delta-sharing/shares")
    for recipient, listed in (("wayne", []), ("acme", [{"name": "acme"}])):  # each protocol serves its own format
        answer = requests.get(shares, headers={"Authorization": f"Bearer {iceberg_world.token(recipient)}"}, timeout=10)
        assert answer.json() == {"items": listed}


def test_a_scan_reads_exactly_the_recipients_rows_through_backfill_and_incremental(iceberg_world: IcebergWorld) -> None:
    catalog = iceberg_world.catalog("wayne", warehouse="wayne")
    table = catalog.load_table("sales.orders")
    assert table.metadata_location.startswith("s3://shares/wayne/sales/orders/metadata/")
    assert rows(table.scan().to_arrow()) == expected(ICEBERG_DAY1, "org_6")
    backfill = table.current_snapshot().snapshot_id

    write_table(iceberg_world.root / "src", "orders", ICEBERG_DAY2)
    iceberg_world.transfer("wayne", "2024-01-02", scheduled=True)
    table = catalog.load_table("sales.orders")
    assert table.current_snapshot().snapshot_id != backfill
    assert rows(table.scan().to_arrow()) == expected(ICEBERG_DAY2, "org_6")
    assert rows(table.scan(snapshot_id=backfill).to_arrow()) == expected(ICEBERG_DAY1, "org_6")
    assert rows(table.scan(row_filter=EqualTo("id", 5)).to_arrow()) == expected([ICEBERG_DAY2[-2]], "org_6")
    assert table.scan(row_filter=EqualTo("id", 5)).count() == 1  # the filter comes back as every task's residual
    assert table.scan().count() == 3
    assert rows(iceberg_world.catalog("stark").load_table("sales.orders").scan().to_arrow()) == expected(ICEBERG_DAY1, "org_7")


def test_a_loaded_table_shows_no_provider_path_property_or_token(iceberg_world: IcebergWorld) -> None:
    answer = iceberg_world.request("GET", "/v1/wayne/namespaces/sales/tables/orders", iceberg_world.token("wayne"))
    assert answer.status_code == 200
    body = answer.json()
    text = answer.text
    for secret in (str(iceberg_world.root), "file:", "incsync.", "org_6", iceberg_world.token("wayne")):
        assert secret not in text
    assert body["metadata"]["location"] == "s3://shares/wayne/sales/orders"
    assert body["config"]["scan-planning-mode"] == "server"
    assert body["config"]["s3.endpoint"] == iceberg_world.uri + "/s3"
    (credential,) = body["storage-credentials"]
    assert credential["prefix"] == "s3://shares/wayne/sales/orders/"
    assert sorted(credential["config"]) == ["s3.access-key-id", "s3.secret-access-key", "s3.session-token",
                                            "s3.session-token-expires-at-ms"]
    refs = iceberg_world.request("GET", "/v1/wayne/namespaces/sales/tables/orders?snapshots=refs", iceberg_world.token("wayne"))
    current = body["metadata"]["current-snapshot-id"]
    assert [s["snapshot-id"] for s in refs.json()["metadata"]["snapshots"]] == [current]


def test_config_names_the_recipients_prefix_and_server_side_planning(iceberg_world: IcebergWorld) -> None:
    answer = iceberg_world.request("GET", "/v1/config?warehouse=stark", iceberg_world.token("stark"))
    assert answer.json()["overrides"] == {"prefix": "stark", "scan-planning-mode": "server"}
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan" in answer.json()["endpoints"]
    assert not any(e.startswith(("POST /v1/{prefix}/namespaces ", "DELETE")) for e in answer.json()["endpoints"])


def test_share_create_hands_over_the_iceberg_catalog_settings(iceberg_world: IcebergWorld, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    out = tmp_path / "stark.share"
    assert main(["share", "rotate", "stark", "-o", str(out), "--overlap-hours", "1", "-c", str(iceberg_world.config)]) == 0
    said = capsys.readouterr().out
    profile = json.loads(out.read_text())
    settings = profile["icebergCatalog"]
    assert settings == {"uri": iceberg_world.uri, "token": profile["bearerToken"], "warehouse": "stark"}
    assert f"Iceberg REST catalog: uri {iceberg_world.uri}, warehouse stark" in said and settings["token"] not in said
    catalog = RestCatalog("stark", **settings)
    assert rows(catalog.load_table("sales.orders").scan().to_arrow()) == expected(ICEBERG_DAY1, "org_7")

    acme = tmp_path / "acme.share"
    assert main(["share", "rotate", "acme", "-o", str(acme), "--overlap-hours", "1", "-c", str(iceberg_world.config)]) == 0
    assert "icebergCatalog" not in json.loads(acme.read_text())  # a Delta copy: the Delta Sharing profile alone

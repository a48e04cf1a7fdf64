"""A downstream asset's input of a model: a reader of each recipient's published copy (issue 28)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from incsync.destinations.readers import PublishedCopies
from incsync.orchestration.definitions import build_definitions
from incsync.orchestration.resources import IncsyncConfigResource
from incsync_tests.support.lake import lake_config, materialize_partition, order, ts, write_table

RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_files"},
    {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_delta", "enabled": False},
]
DESTINATIONS = [
    {"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
    {"name": "globex_files", "kind": "object_storage", "path": "./out/globex"},
    {"name": "initech_delta", "kind": "delta", "path": "./out/initech"},
]


def test_a_downstream_asset_reads_every_enabled_recipients_published_copy(tmp_path: Path, dagster_instance, spark) -> None:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2), status="paid"), order(3, "org_2", ts(1, 3)),
    ])
    defs = build_definitions(lake_config(tmp_path, recipients=RECIPIENTS, destinations=DESTINATIONS))
    for recipient in ("acme", "globex"):
        materialize_partition(defs, dagster_instance, window="2024-01-01", recipient=recipient)
    seen: dict[str, object] = {}

    @dg.asset(ins={"orders": dg.AssetIn(key=["lake", "orders"])})
    def order_report(orders: PublishedCopies) -> None:
        seen["recipients"] = orders.recipients
        seen["locations"] = {r: orders.location(r) for r in orders.recipients}
        seen["rows"] = {r: sorted((row["id"], row["status"]) for row in orders.read(r).to_pylist()) for r in orders.recipients}

    report_job = dg.define_asset_job("report", selection=[order_report.key])
    merged = dg.Definitions.merge(defs, dg.Definitions(assets=[order_report], jobs=[report_job]))
    assert merged.resolve_job_def("report").execute_in_process(instance=dagster_instance).success
    assert seen == {
        "recipients": ["acme", "globex"],  # initech is disabled
        "locations": {"acme": str(tmp_path / "out" / "acme" / "orders"),
                      "globex": str(tmp_path / "out" / "globex" / "orders" / "recipient=globex")},
        "rows": {"acme": [(1, "new"), (2, "paid")], "globex": [(3, "new")]},
    }


def test_a_downstream_input_reads_through_the_runs_resources(tmp_path: Path, dagster_instance, spark) -> None:
    """The IO manager declares the ``incsync`` resource and the destination kinds' and reads through them:
    a run given another file (globex disabled there) reads the copies that file names."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(3, "org_2", ts(1, 3))])
    file = lake_config(tmp_path, recipients=RECIPIENTS, destinations=DESTINATIONS)
    defs = build_definitions(file)
    assert defs.resources["incsync_io_manager"].required_resource_keys == {
        "incsync", "delta_destination", "object_storage_destination"}
    for recipient in ("acme", "globex"):
        materialize_partition(defs, dagster_instance, window="2024-01-01", recipient=recipient)
    doc = yaml.safe_load(file.read_text())
    doc["recipients"] = [{**r, "enabled": r["id"] == "acme"} for r in doc["recipients"]]
    other = file.with_name("other.yaml")
    other.write_text(yaml.safe_dump(doc))
    seen: dict[str, object] = {}

    @dg.asset(ins={"orders": dg.AssetIn(key=["lake", "orders"])})
    def order_report(orders: PublishedCopies) -> None:
        seen["rows"] = {r: [row["id"] for row in orders.read(r).to_pylist()] for r in orders.recipients}

    model = defs.get_assets_def(dg.AssetKey(["lake", "orders"]))
    assert dg.materialize([model, order_report], selection=[order_report.key], instance=dagster_instance,
                          resources={**defs.resources, "incsync": IncsyncConfigResource(config_path=str(other))}).success
    assert seen == {"rows": {"acme": [1]}}

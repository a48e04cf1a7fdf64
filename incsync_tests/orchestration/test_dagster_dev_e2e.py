"""End to end through a running `dagster dev`: a UI-style backfill of 2 windows × 2 recipients over
GraphQL, the destination rows and metadata it leaves, and the asset page rendered by Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef

from incsync.config.load import load_config
from incsync.operations.concurrency import dagster_yaml
from incsync_tests.support.browser import stop_group
from incsync_tests.support.host import free_port, in_ci
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

REPO = Path(__file__).resolve().parents[2]
MODEL = dg.AssetKey(["lake", "orders"])
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]
KEYS = ["acme|2024-01-01", "acme|2024-01-02", "globex|2024-01-01", "globex|2024-01-02"]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


class Dagster:
    def __init__(self, port: int, log: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def graphql(self, query: str, **variables) -> dict:
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            doc = json.load(response)
        assert "errors" not in doc, doc
        return doc["data"]


@pytest.fixture
def dagster_dev(tmp_path: Path) -> Iterator[Dagster]:
    write_table(
        tmp_path / "src", "orders",
        [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(2, 11)), order(3, "org_2", ts(1, 12)),
         order(4, "org_2", ts(2, 13)), order(5, "org_2", ts(2, 14))],
    )
    config_file = lake_config(tmp_path, recipients=RECIPIENTS, model={"integrity_check": "after_transfer"})
    doc = yaml.safe_load(config_file.read_text())
    doc["spark"] = {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}
    config_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(dagster_yaml(load_config(config_file), REPO / "dagster.yaml", dagster_home=home))
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCSYNC_CONFIG": str(config_file),
        "INCSYNC_AUTOMATION": "stopped",  # this test launches its own backfill
        "INCSYNC_STAGING_DIR": str(tmp_path / "staging"),
        "DAGSTER_DISABLE_TELEMETRY": "yes",
    }
    log = tmp_path / "dagster-dev.log"
    dagster = str(Path(sys.executable).parent / "dagster")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [dagster, "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        server = Dagster(port, log)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{server.url}/server_info", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        yield server
    finally:
        stop_group(proc)


def _wait_for_backfill(server: Dagster, backfill_id: str, timeout: float) -> list[dict]:
    """Until every planned run finished (the backfill's own status lags by one 30 s daemon loop)."""
    query = """query ($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill {
        status runs { runId status tags { key value } } } } }"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        backfill = server.graphql(query, id=backfill_id)["partitionBackfillOrError"]
        runs = backfill["runs"]
        done = {r["status"] for r in runs} <= {"SUCCESS", "FAILURE", "CANCELED"}
        # Dagster plans 2 runs here (one per window, both recipients): the backfill policy's grouping.
        if len(runs) == 2 and done:
            return runs
        if backfill["status"] in ("FAILED", "CANCELED", "COMPLETED_FAILED"):
            break
        time.sleep(1)
    raise AssertionError(f"backfill {backfill_id} did not finish: {backfill}\n{server.log.read_text()[-3000:]}")


@pytest.mark.slow  # ~100 s: make test-long (the daemon-driven launch paths also run in test_job_names.py)
def test_backfill_through_dagster_dev_and_the_asset_page(dagster_dev: Dagster, tmp_path: Path):
    server = dagster_dev
    repo = {"repositoryLocationName": "incsync", "repositoryName": "__repository__"}
    add = """mutation ($repo: RepositorySelector!, $key: String!) {
        addDynamicPartition(repositorySelector: $repo, partitionsDefName: "recipients", partitionKey: $key) {
        __typename } }"""
    for key in ("acme", "globex"):
        assert server.graphql(add, repo=repo, key=key)["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess"
    launch = """mutation ($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
        __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
    params = {"assetSelection": [{"path": ["lake", "orders"]}], "partitionNames": KEYS, "tags": [{"key": "incsync/tag/e2e", "value": "yes"}]}
    launched = server.graphql(launch, params=params)["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched

    # Both runs write to both destinations: their transfer slots run them one after the other; each run
    # also runs the integrity check.
    runs = _wait_for_backfill(server, launched["backfillId"], timeout=300)

    assert sorted(r["status"] for r in runs) == ["SUCCESS", "SUCCESS"]  # multi_run: one run per window, both recipients
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "globex" / "orders")] == [3, 4, 5]
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path / "dagster_home"))) as instance:
        records = instance.fetch_materializations(MODEL, limit=10).records
        metadata = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
    assert sorted(metadata) == KEYS
    assert {k: m["rows_transferred"].value for k, m in metadata.items()} == dict(zip(KEYS, [1, 1, 1, 2], strict=False))
    assert metadata["globex|2024-01-02"]["high_watermark"].value == ts(2, 14).timestamp()
    assert isinstance(metadata["acme|2024-01-01"]["rows_transferred"], dg.IntMetadataValue)
    assert isinstance(metadata["acme|2024-01-01"]["window_start"], dg.TimestampMetadataValue)

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        assert not in_ci(), "Debian chromium is missing: run scripts/system-deps.sh"
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    page = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=20000",
         "--dump-dom", f"{server.url}/assets/lake/orders?view=partitions"],
        capture_output=True, text=True, timeout=90, start_new_session=True,
    )
    dom = page.stdout
    assert "orders" in dom, page.stderr[-2000:]
    assert "acme" in dom and "globex" in dom, dom[-3000:]

    # The integrity check ran after each transfer run (issue 15) and shows on the asset's checks tab.
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path / "dagster_home"))) as instance:
        check = dg.AssetCheckKey(MODEL, "integrity")
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check]
        evaluation = record.event.dagster_event.event_specific_data
    assert evaluation.passed, evaluation.metadata
    assert evaluation.metadata["total_rows_missing"].value == 0 and evaluation.metadata["total_rows_compared"].value >= 2
    checks = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=20000",
         "--dump-dom", f"{server.url}/assets/lake/orders?view=checks"],
        capture_output=True, text=True, timeout=90, start_new_session=True,
    ).stdout
    assert "integrity" in checks, checks[-3000:]
    assert "Verify orders" in checks or "Passed" in checks or "Succeeded" in checks, checks[-3000:]

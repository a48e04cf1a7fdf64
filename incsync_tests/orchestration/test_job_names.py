"""Runs are named after their model wherever they are launched (issue 16): the recipient sensor's initial
backfills and the UI's job backfills go through Dagster's own daemon code (sensor and backfill iterations
over a loaded workspace) and are recorded as job ``orders``. Runs are created, not executed: a mocked run
coordinator keeps them queued.

A *pure asset* backfill (the asset page's "Materialize" button) cannot be named after the model: Dagster
launches its runs on the implicit asset job (see ``test_an_asset_page_backfill_runs_on_the_implicit_job``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.backfill import execute_backfill_iteration
from dagster._daemon.sensor import execute_sensor_iteration
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from dagster_graphql.test.utils import execute_dagster_graphql

from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.sensors import RECIPIENT_SENSOR
from incsync_tests.support.lake import lake_config

RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]
LOCATION = "incsync"
KEYS = ["acme|2024-01-01", "acme|2024-01-02", "globex|2024-01-01", "globex|2024-01-02"]
LOG = logging.getLogger("incsync_tests.job_names")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A workspace loading the definitions of a two-recipient config, as the daemon does, over an
    instance whose runs stay queued (no transfer runs)."""
    monkeypatch.setenv("INCSYNC_AUTOMATION", "running")
    config = lake_config(tmp_path, recipients=RECIPIENTS)
    doc = yaml.safe_load(config.read_text())  # a second model: the sensor targets one job per model
    doc["models"].append({**doc["models"][0], "model_name": "returns"})
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    module = tmp_path / "defs.py"
    module.write_text(f"from incsync.orchestration.definitions import build_definitions\n\ndefs = build_definitions({str(config)!r})\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    overrides = {"run_coordinator": {"module": "dagster._core.test_utils", "class": "MockedRunCoordinator"}}
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(python_file=str(module), working_directory=str(tmp_path)),
        location_name=LOCATION,
    )
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as context:
            entry = next(iter(context.create_request_context().get_code_location_entries().values()))
            assert entry.code_location is not None, entry.load_error
            yield context


def _runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return sorted(instance.get_runs(), key=lambda r: r.tags.get("dagster/asset_partition_range_start", ""))


def _launch_backfill(context, params: dict) -> str:
    result = execute_dagster_graphql(
        context.create_request_context(), LAUNCH_PARTITION_BACKFILL_MUTATION, {"backfillParams": params}
    )
    launched = result.data["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    for error in execute_backfill_iteration(context, LOG):
        assert error is None, error
    return launched["backfillId"]


def test_the_sensor_launches_each_new_recipients_backfill_as_the_models_job(workspace) -> None:
    instance = workspace.instance
    for error in execute_sensor_iteration(workspace, LOG, None, None):
        assert error is None, error

    sensor = _sensor(workspace)
    [tick] = instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id)
    assert tick.status == TickStatus.SUCCESS, tick.error
    assert instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS) == ["acme", "globex"]
    # Per model, both recipients from 2024-01-01 share one run (same window range).
    runs = sorted(_runs(instance), key=lambda r: r.job_name)
    assert [(r.job_name, r.tags["incsync/model"], r.asset_selection) for r in runs] == [
        ("orders", "orders", {dg.AssetKey(["lake", "orders"])}),
        ("returns", "returns", {dg.AssetKey(["lake", "returns"])}),
    ]
    assert {(r.tags["incsync/mode"], r.tags["dagster/asset_partition_range_start"]) for r in runs} == {
        ("backfill", "acme|2024-01-01")
    }


def _sensor(workspace):
    location = workspace.create_request_context().get_code_location(LOCATION)
    [repository] = location.get_repositories().values()
    return repository.get_sensor(RECIPIENT_SENSOR)


def test_a_backfill_from_the_jobs_page_runs_as_the_models_job_in_batched_runs(workspace) -> None:
    """What the UI sends from the job's page (Jobs → orders → Materialize all, or its Partitions tab): a job
    backfill over ``orders_partition_set`` (ui-core LaunchAssetChoosePartitionsDialog.tsx)."""
    instance = workspace.instance
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])
    backfill_id = _launch_backfill(workspace, {
        "selector": {
            "partitionSetName": "orders_partition_set",
            "repositorySelector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"},
        },
        "assetSelection": [{"path": ["lake", "orders"]}],
        "partitionNames": KEYS,
    })

    runs = _runs(instance)
    assert {r.job_name for r in runs} == {"orders"}
    assert {r.tags["dagster/backfill"] for r in runs} == {backfill_id}
    # The asset's backfill policy still batches: one run per window over both recipients.
    assert [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"]) for r in runs] == [
        ("acme|2024-01-01", "globex|2024-01-01"), ("acme|2024-01-02", "globex|2024-01-02"),
    ]


def test_an_asset_page_backfill_runs_on_the_implicit_job(workspace) -> None:
    """Dagster 1.13 names these runs ``__ASSET_JOB``, whatever jobs the asset is in: the asset page's
    dialog sends a job backfill only when the asset's first job is not a hidden one, and the asset's job
    names are sorted, so ``__ASSET_JOB`` comes before any lower-case model name
    (dagster_webserver ui-core LaunchAssetExecutionButton.tsx ``getCommonJob``,
    LaunchAssetChoosePartitionsDialog.tsx ``onLaunchAsBackfill``; dagster
    _core/remote_representation/external_data.py ``job_names=sorted(...)``); the daemon then launches a pure
    asset backfill's runs on a job whose name starts with ``__ASSET_JOB``
    (dagster/_core/execution/submit_asset_runs.py ``_get_implicit_job_name_for_assets``). If this test
    fails, Dagster lets a named job carry these runs: name them after the model and update the README's "Dagster UI" section."""
    instance = workspace.instance
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])
    _launch_backfill(workspace, {"assetSelection": [{"path": ["lake", "orders"]}], "partitionNames": KEYS})

    assert {r.job_name for r in _runs(instance)} == {"__ASSET_JOB"}

"""Each model asset's freshness policy comes from its slowest schedule, and Dagster's own freshness
daemon marks a model whose schedule stopped as failing, read back through GraphQL as the UI reads it
(the asset page's freshness status). The clock is Dagster's own frozen clock, as its freshness tests do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.freshness import FreshnessDaemon
from dagster_graphql.test.utils import execute_dagster_graphql

from incsync.config.load import load_config
from incsync.core.cron import longest_gap
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.freshness import freshness_description, freshness_policy
from incsync_tests.support.lake import JAN1, lake_config, order, ts, write_table

LOCATION = "incsync"
ORDERS, RETURNS = dg.AssetKey(["lake", "orders"]), dg.AssetKey(["lake", "returns"])
LOG = logging.getLogger("incsync_tests.freshness")

FRESHNESS_QUERY = """
query Freshness($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    __typename
    ... on AssetNode {
      internalFreshnessPolicy { __typename ... on TimeWindowFreshnessPolicy { failWindowSeconds warnWindowSeconds } }
      freshnessStatusInfo { freshnessStatus freshnessStatusMetadata { lastMaterializedTimestamp } }
    }
  }
}
"""


@pytest.mark.parametrize(("cron", "gap"), [
    ("*/15 * * * *", timedelta(minutes=15)),
    ("0 3 * * *", timedelta(days=1)),
    ("0 9 * * 1-5", timedelta(days=3)),  # Friday 09:00 to Monday 09:00
    ("*/5 * * * 1-5", timedelta(days=2, minutes=5)),  # Friday 23:55 to Monday 00:00
    ("30 2,14 1 * *", timedelta(days=30, hours=12)),  # 1 January 14:30 to 1 February 02:30
    ("0 9,17 * * *", timedelta(hours=16)),
    ("* * * * *", timedelta(minutes=1)),
])
def test_the_longest_gap_between_ticks(cron: str, gap: timedelta) -> None:
    assert longest_gap(cron) == gap


def test_the_policy_follows_the_slowest_schedule_that_may_transfer_the_model(tmp_path: Path) -> None:
    """The model's own frequency hourly; tier ``bulk`` daily for orders only: orders gets the daily window,
    returns (no tier cron) its hourly one."""
    file = _two_models(tmp_path, orders="0 * * * *", returns="0 * * * *")
    doc = yaml.safe_load(file.read_text())
    doc["tiers"] = [{"name": "bulk", "models": {"orders": "0 3 * * *"}}]
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    config = load_config(file)
    orders, returns = config.models
    assert freshness_policy(config, orders) == dg.FreshnessPolicy.time_window(
        fail_window=timedelta(days=2), warn_window=timedelta(days=1.5))
    assert freshness_policy(config, returns) == dg.FreshnessPolicy.time_window(
        fail_window=timedelta(hours=2), warn_window=timedelta(minutes=90))
    assert freshness_description(config, orders) == (
        "Freshness: warns 1.5 d and fails 2 d after the last transfer landed (its slowest schedule `0 3 * * *` "
        "ticks at least every 1 d).")
    assert freshness_description(config, returns) == (
        "Freshness: warns 1.5 h and fails 2 h after the last transfer landed (its slowest schedule `0 * * * *` "
        "ticks at least every 1 h).")


def _two_models(tmp_path: Path, *, orders: str, returns: str) -> Path:
    file = lake_config(tmp_path, model={"frequency": orders})
    doc = yaml.safe_load(file.read_text())
    doc["models"].append({**doc["models"][0], "model_name": "returns", "frequency": returns})
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The daemon's view of a code location with two every-minute models (warn after 90 s, fail after 120 s),
    over a SQLite instance with incsync's event log (what `incsync dagster-yaml` configures)."""
    from incsync.operations.dagster_compat import event_log_storage_config

    monkeypatch.setenv("INCSYNC_AUTOMATION", "stopped")
    config = _two_models(tmp_path, orders="* * * * *", returns="* * * * *")
    module = tmp_path / "defs.py"
    module.write_text(f"from incsync.orchestration.definitions import build_definitions\n\ndefs = build_definitions({str(config)!r})\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(python_file=str(module), working_directory=str(tmp_path)),
        location_name=LOCATION,
    )
    with dg.instance_for_test(temp_dir=str(home), overrides={"event_log_storage": event_log_storage_config(home)}) as instance:
        with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as context:
            entry = next(iter(context.create_request_context().get_code_location_entries().values()))
            assert entry.code_location is not None, entry.load_error
            instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
            yield context


def _transfer_lands(instance: dg.DagsterInstance, key: dg.AssetKey, window: str) -> float:
    """A window of acme's copy materialized, as a scheduled run records it; its event's timestamp."""
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=str(partition_key(window, "acme"))))
    event = instance.get_latest_materialization_event(key)
    assert event is not None
    return event.timestamp


def _evaluate(context) -> None:  # noqa: ANN001
    """One iteration of Dagster's freshness daemon (what `dagster dev` runs every 30 s)."""
    for _ in FreshnessDaemon().run_iteration(context):
        pass


def _status(context, key: dg.AssetKey) -> tuple[str, float | None]:  # noqa: ANN001
    result = execute_dagster_graphql(context.create_request_context(), FRESHNESS_QUERY, {"assetKey": {"path": key.path}})
    assert result.errors is None, result.errors
    node = result.data["assetNodeOrError"]
    assert node["internalFreshnessPolicy"] == {"__typename": "TimeWindowFreshnessPolicy", "failWindowSeconds": 120,
                                               "warnWindowSeconds": 90}
    info = node["freshnessStatusInfo"]
    meta = info["freshnessStatusMetadata"]
    return info["freshnessStatus"], meta and meta["lastMaterializedTimestamp"]


def test_a_stopped_schedule_fails_freshness_in_the_ui_and_a_running_one_passes(workspace) -> None:
    instance = workspace.instance
    t0 = JAN1.timestamp() + 1_000_000.0
    _evaluate(workspace)
    assert _status(workspace, ORDERS) == ("UNKNOWN", None)  # never transferred: Dagster cannot tell

    with freeze_time(t0):  # both schedules' runs land
        landed = {key: _transfer_lands(instance, key, "2024-01-01") for key in (ORDERS, RETURNS)}
    assert landed == {ORDERS: t0, RETURNS: t0}
    with freeze_time(t0 + 30):
        _evaluate(workspace)
        assert _status(workspace, ORDERS) == ("HEALTHY", t0)
        assert _status(workspace, RETURNS) == ("HEALTHY", t0)

    # orders' schedule stops; returns' keeps landing a transfer every minute.
    with freeze_time(t0 + 60):
        _transfer_lands(instance, RETURNS, "2024-01-02")
    with freeze_time(t0 + 100):
        _evaluate(workspace)
        assert _status(workspace, ORDERS) == ("WARNING", t0)  # 100 s: past the 90 s warn window
        assert _status(workspace, RETURNS) == ("HEALTHY", t0 + 60)
    with freeze_time(t0 + 120):
        _transfer_lands(instance, RETURNS, "2024-01-03")
    with freeze_time(t0 + 125):
        _evaluate(workspace)
        assert _status(workspace, ORDERS) == ("DEGRADED", t0)  # the failing state: 125 s, past the 120 s fail window
        assert _status(workspace, RETURNS) == ("HEALTHY", t0 + 120)

    # orders' schedule resumes: its next transfer makes it fresh again.
    with freeze_time(t0 + 130):
        _transfer_lands(instance, ORDERS, "2024-01-02")
    with freeze_time(t0 + 135):
        _evaluate(workspace)
        assert _status(workspace, ORDERS) == ("HEALTHY", t0 + 130)


def test_a_scheduled_transfer_run_makes_the_model_fresh_until_its_window_passes(workspace, spark, tmp_path: Path) -> None:
    """A real transfer through the model's job (what its schedule launches; incsync reports its materializations
    itself) is what Dagster's freshness reads: fresh after it, failing once the fail window passed."""
    from incsync.config.tags import INCREMENTAL, MODE_TAG
    from incsync.operations.dagster_compat import DEFER_ASSET_EVENTS_TAG
    from incsync.orchestration.definitions import build_definitions

    instance = workspace.instance
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(1, 11))])
    defs = build_definitions(str(tmp_path / "incsync.yaml"))
    run = defs.resolve_job_def("orders").execute_in_process(
        instance=instance, partition_key=partition_key("2024-01-01", "acme"), tags={MODE_TAG: INCREMENTAL})
    assert run.success and run.dagster_run.tags[DEFER_ASSET_EVENTS_TAG] == "true"  # reported by incsync, not Dagster
    event = instance.get_latest_materialization_event(ORDERS)
    assert event is not None and event.asset_materialization.partition == "acme|2024-01-01"
    landed = event.timestamp
    with freeze_time(landed + 30):
        _evaluate(workspace)
        assert _status(workspace, ORDERS) == ("HEALTHY", landed)
        assert _status(workspace, RETURNS) == ("UNKNOWN", None)
    with freeze_time(landed + 121):  # no tick of orders' schedule landed since
        _evaluate(workspace)
        assert _status(workspace, ORDERS) == ("DEGRADED", landed)

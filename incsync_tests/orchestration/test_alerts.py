"""The failure-alert sensor: real failed runs in a real instance, the sensor ticked by the daemon's own sensor
iteration over a workspace that loads the definitions (so Dagster evaluates it as `dagster-daemon` does, with
the code location's origin), its POSTs received by a local HTTP server; whose runs it posts, once each; the
blamed filter; no secret in what is posted."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.run_status_sensor_definition import RunStatusSensorCursor
from dagster._core.remote_origin import (
    InProcessCodeLocationOrigin,
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.sensor import execute_sensor_iteration

from incsync.config.load import load_config
from incsync.config.tags import RECIPIENT_TAG
from incsync.operations.runs import run_transfers
from incsync.orchestration.alerts import ALERT_SENSOR, alert_payload, cursor_storage_id
from incsync.orchestration.definitions import build_definitions
from incsync_tests.operations.test_blame import ACME_PG, LOGIN, PG, run
from incsync_tests.support.destinations import ROLE_DSN_ENV
from incsync_tests.support.lake import lake_config, order, ts, write_table
from incsync_tests.support.webhook import Webhook, webhook_server

URL_ENV = "INCSYNC_TEST_ALERT_WEBHOOK"
PASSWORD = "s3cr3t-Pa55word"
LOCATION = "incsync"
LAKE = dg.AssetKey(["lake", "orders"])
LOG = logging.getLogger("incsync_tests.alerts")
CONTRACT = ("source rows break the model's contract (NULL or duplicate primary key, NULL last-modified): fix the "
            "rows at the source or the model's primary_key")
BEFORE_INCSYNC = "the run failed before incsync saw an error: read the run's events in Dagster"


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Webhook]:
    """A local webhook; its URL in URL_ENV."""
    with webhook_server() as hook:
        monkeypatch.setenv(URL_ENV, hook.url)
        yield hook


def _with_alerts(config: Path, alerts: dict[str, object]) -> Path:
    doc = yaml.safe_load(config.read_text())
    doc["alerts"] = alerts
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


class Daemon:
    """The daemon's sensor iteration over a workspace that loads the config as code location ``incsync``,
    with only the alert sensor started (as an operator starts it in the UI); each tick 31 s after the last,
    past the sensor's minimum interval."""

    def __init__(self, workspace, instance: dg.DagsterInstance):  # noqa: ANN001 - Dagster's workspace context
        self.workspace = workspace
        self.instance = instance
        self.clock = time.time()
        location = workspace.create_request_context().get_code_location(LOCATION)
        [self.repository] = location.get_repositories().values()
        self.sensor = self.repository.get_sensor(ALERT_SENSOR)
        instance.start_sensor(self.sensor)

    def tick(self, *, ok: bool = True):  # noqa: ANN201 - Dagster's InstigatorTick
        self.clock += 31
        with freeze_time(self.clock):
            for error in execute_sensor_iteration(self.workspace, LOG, None, None):
                assert error is None or not ok, error
        tick = self.instance.get_ticks(self.sensor.get_remote_origin_id(), self.sensor.selector_id, limit=1)[0]
        assert (tick.status != TickStatus.FAILURE) == ok, tick.error
        return tick

    def job_origin(self, job_name: str) -> RemoteJobOrigin:
        return self.repository.get_full_job(job_name).get_remote_origin()


@contextmanager
def running_daemon(config: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    monkeypatch.setenv("INCSYNC_AUTOMATION", "stopped")  # no transfer runs of the recipient sensor or schedules
    module = config.parent / "defs.py"
    module.write_text(f"from incsync.orchestration.definitions import build_definitions\n\ndefs = build_definitions({str(config)!r})\n")
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(python_file=str(module), working_directory=str(config.parent)),
        location_name=LOCATION,
    )
    with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as context:
        entry = next(iter(context.create_request_context().get_code_location_entries().values()))
        assert entry.code_location is not None, entry.load_error
        daemon = Daemon(context, instance)
        daemon.tick()  # the sensor starts after the newest failure so far
        yield daemon


def _failed_run(instance: dg.DagsterInstance, config: Path, origin: RemoteJobOrigin | None, *,
                asset_selection: frozenset[dg.AssetKey] | None = frozenset({LAKE})) -> str:
    """A failed run of the model's job as a code location launches it (``origin``; no asset selection: the
    whole job, from its page), whose failure Dagster recorded before incsync saw an error."""
    job = build_definitions(config).resolve_job_def("orders")
    run = instance.create_run_for_job(job_def=job, remote_job_origin=origin, asset_selection=asset_selection,
                                      tags={RECIPIENT_TAG: "acme"})
    instance.report_run_failed(run)
    return run.run_id


def _cli_transfer(instance: dg.DagsterInstance, config: Path) -> str:
    """A transfer as `incsync transfer` and the worker run it (``runs.run_in_process``): the failed run's id."""
    before = {r.run_id for r in instance.get_runs()}
    loaded = load_config(config)
    lines = run_transfers(build_definitions(config), instance, config=loaded, model=loaded.models[0],
                          recipient=loaded.recipients[0], windows=["2024-01-01"])
    assert [line.ok for line in lines] == [False]
    [run] = [r for r in instance.get_runs() if r.run_id not in before]
    assert run.remote_job_origin is None and run.status == dg.DagsterRunStatus.FAILURE
    return run.run_id


@dg.asset(key=["elsewhere", "orders"])
def _someone_elses_asset() -> None:
    raise ValueError("a failure of another tool's asset on the same instance")


def test_every_failed_transfer_is_posted_once_whoever_launched_it(
    spark, tmp_path: Path, dagster_instance, webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs the CLI or the worker executed have no code location: Dagster's run-failure sensors drop them
    unless they monitor all code locations. Each failed transfer of this config's model is posted once, at the
    tick after it failed; a run another code location launched and another tool's run are not."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(1, "org_1", ts(1, 2))])
    config = _with_alerts(lake_config(tmp_path), {"webhook_url_env": URL_ENV})
    instance = dagster_instance
    with running_daemon(config, instance, monkeypatch) as daemon:
        cli = _cli_transfer(instance, config)
        scheduled = _failed_run(instance, config, daemon.job_origin("orders"))
        elsewhere = RemoteJobOrigin(repository_origin=RemoteRepositoryOrigin(
            code_location_origin=RegisteredCodeLocationOrigin("elsewhere"), repository_name="__repository__"),
            job_name="orders")
        _failed_run(instance, config, elsewhere)
        assert not dg.materialize([_someone_elses_asset], instance=instance, raise_on_error=False).success
        daemon.tick()
        assert webhook.run_ids() == [cli, scheduled]

        from_job_page = _failed_run(instance, config, daemon.job_origin("orders"), asset_selection=None)
        again = _cli_transfer(instance, config)
        daemon.tick()
        assert daemon.tick().skip_reason == (
            "0 failed run(s) since the last tick, none a transfer of this configuration blamed on a party "
            "alerts.blamed (provider, recipient, unknown) lists")

    assert webhook.run_ids() == [cli, scheduled, from_job_page, again]
    assert [(p["model"], p["recipients"], p["blamed"], p["reason"]) for p in webhook.posted] == [
        ("orders", ["acme"], "provider", CONTRACT), ("orders", ["acme"], "unknown", BEFORE_INCSYNC),
        ("orders", ["acme"], "unknown", BEFORE_INCSYNC), ("orders", ["acme"], "provider", CONTRACT),
    ]
    assert all("T0KEN" not in body.decode() and "127.0.0.1" not in body.decode() for body in webhook.bodies)
    # The run's own events say the alert sensor acted on it, as Dagster's run-failure sensors write.
    engine = [e.message for e in instance.all_logs(cli, of_type=dg.DagsterEventType.ENGINE_EVENT)]
    assert f'Sensor "{ALERT_SENSOR}" acted on run status FAILURE of run {cli}.' in engine


def test_a_recipient_blamed_failure_is_posted_without_secrets_and_the_filter_holds(
    spark, tmp_path: Path, dagster_instance, pg_role, webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    role, admin_dsn = pg_role
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER ROLE "{role}" NOLOGIN')
    database = admin_dsn.rsplit("/", 1)[1]
    monkeypatch.setenv(ROLE_DSN_ENV, f"postgresql://{role}:{PASSWORD}@127.0.0.1:5432/{database}")
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1))])
    config = _with_alerts(
        lake_config(tmp_path, recipients=[ACME_PG], destinations=[PG]),
        {"webhook_url_env": URL_ENV, "blamed": ["recipient"], "dagster_url": "https://dagster.example.com/"},
    )
    with running_daemon(config, dagster_instance, monkeypatch) as daemon:
        result = run(config, dagster_instance, ["acme"])
        assert not result.success
        daemon.tick()
        daemon.tick()

    [body] = webhook.bodies
    assert webhook.posted == [{
        "event": "incsync.transfer_failed",
        "run_id": result.run_id,
        "run_url": f"https://dagster.example.com/runs/{result.run_id}",
        "job": "__ASSET_JOB",
        "model": "orders",
        "models": ["orders"],
        "recipients": ["acme"],
        "windows": {"acme": ["2024-01-01"]},
        "blamed": "recipient",
        "reason": LOGIN,
        "blamed_by_recipient": {"acme": {"party": "recipient", "reason": LOGIN}},
    }]
    text = body.decode()
    assert PASSWORD not in text and "postgresql://" not in text and "T0KEN" not in text and role not in text

    _with_alerts(config, {"webhook_url_env": URL_ENV, "blamed": ["provider"]})
    assert alert_payload(dagster_instance, dagster_instance.get_run_by_id(result.run_id), load_config(config)) is None


def test_a_provider_blamed_failure_alerts_the_provider_filter_and_an_unset_url_skips(
    spark, tmp_path: Path, dagster_instance, webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(1, "org_1", ts(1, 2))])
    config = _with_alerts(lake_config(tmp_path), {"webhook_url_env": URL_ENV, "blamed": ["provider"]})
    with running_daemon(config, dagster_instance, monkeypatch) as daemon:
        posted = run(config, dagster_instance, ["acme"])
        daemon.tick()
        monkeypatch.delenv(URL_ENV)
        unposted = run(config, dagster_instance, ["acme"])
        skipped = daemon.tick()
        monkeypatch.setenv(URL_ENV, webhook.url)
        daemon.tick()

    assert [(p["run_id"], p["blamed"], p["reason"], p["recipients"], p["run_url"]) for p in webhook.posted] == [
        (posted.run_id, "provider", CONTRACT, ["acme"], f"/runs/{posted.run_id}")
    ]
    assert not unposted.success
    assert skipped.skip_reason == (
        f"${URL_ENV} is not set: export the webhook URL in it to post alerts (1 failed transfer(s) not posted)")


def test_a_post_the_webhook_refuses_is_posted_at_a_later_tick_and_once(
    tmp_path: Path, dagster_instance, webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused POST after others stops the tick there; a refused first POST fails the tick and leaves the
    cursor: each failure is posted once, none lost."""
    config = _with_alerts(lake_config(tmp_path), {"webhook_url_env": URL_ENV})
    with running_daemon(config, dagster_instance, monkeypatch) as daemon:
        runs = [_failed_run(dagster_instance, config, daemon.job_origin("orders")) for _ in range(3)]
        webhook.refuse = {1, 2}  # the 2nd POST of the first tick, then the first POST of the next
        daemon.tick()
        assert webhook.run_ids() == runs[:1]
        error = daemon.tick(ok=False).error.to_string()
        assert f"AlertError: the webhook in ${URL_ENV} answered HTTP 503; check the URL and the receiving end" in error
        assert "T0KEN" not in error
        daemon.tick()
        daemon.tick()

    assert webhook.run_ids() == runs
    assert webhook.requests == 5


def test_the_cursor_of_the_run_failure_sensor_it_replaces_carries_on() -> None:
    """A code location upgraded from the run-failure sensor of the same name neither repeats nor skips a failure."""
    assert cursor_storage_id(RunStatusSensorCursor(record_id=41, record_timestamp="2026-01-01T00:00:00").to_json()) == 41
    assert cursor_storage_id("42") == 42
    assert cursor_storage_id("-1") == -1
    assert cursor_storage_id(None) is None
    assert cursor_storage_id("not a cursor") is None


def test_without_an_alerts_section_there_is_no_alert_sensor(tmp_path: Path) -> None:
    config = lake_config(tmp_path)
    names = [s.name for s in build_definitions(config).sensors]
    assert ALERT_SENSOR not in names
    assert ALERT_SENSOR in [s.name for s in build_definitions(_with_alerts(config, {})).sensors]

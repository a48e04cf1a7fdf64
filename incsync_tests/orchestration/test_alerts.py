"""The failure-alert sensor (issue 32): a real failed run in a real instance, the sensor driven with Dagster's
test context, its POST received by a local HTTP server; the blamed filter; no secret in what is posted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dagster as dg
import pytest
import yaml

from incsync.orchestration.alerts import ALERT_SENSOR
from incsync.orchestration.definitions import build_definitions
from incsync_tests.orchestration.conftest import DSN_ENV
from incsync_tests.orchestration.test_blame import ACME_PG, LOGIN, PG, run
from incsync_tests.support import lake_config, order, ts, write_table

URL_ENV = "INCSYNC_TEST_ALERT_WEBHOOK"
PASSWORD = "s3cr3t-Pa55word"


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """A local HTTP server that keeps every body POSTed to it; its URL (with a token, as webhooks have) in URL_ENV."""
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(URL_ENV, f"http://127.0.0.1:{server.server_address[1]}/hooks/T0KEN-abc")
    try:
        yield bodies
    finally:
        server.shutdown()
        server.server_close()


def _with_alerts(config: Path, alerts: dict[str, object]) -> Path:
    doc = yaml.safe_load(config.read_text())
    doc["alerts"] = alerts
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def _evaluate(config: Path, instance: dg.DagsterInstance, run_id: str):  # noqa: ANN202 - the sensor's result
    sensor = build_definitions(config).get_sensor_def(ALERT_SENSOR)
    failure = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records[0]
    context = dg.build_run_status_sensor_context(
        sensor_name=ALERT_SENSOR, dagster_event=failure.event_log_entry.dagster_event, dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run_id),
    ).for_run_failure()
    return sensor(context)


def test_a_recipient_blamed_failure_is_posted_without_secrets_and_the_filter_holds(
    spark, tmp_path: Path, dagster_instance, pg_role, webhook: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    role, admin_dsn = pg_role
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER ROLE "{role}" NOLOGIN')
    database = admin_dsn.rsplit("/", 1)[1]
    monkeypatch.setenv(DSN_ENV, f"postgresql://{role}:{PASSWORD}@127.0.0.1:5432/{database}")
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1))])
    config = _with_alerts(
        lake_config(tmp_path, recipients=[ACME_PG], destinations=[PG]),
        {"webhook_url_env": URL_ENV, "blamed": ["recipient"], "dagster_url": "https://dagster.example.com/"},
    )
    result = run(config, dagster_instance, ["acme"])
    assert not result.success

    assert _evaluate(config, dagster_instance, result.run_id) is None

    [body] = webhook
    assert json.loads(body) == {
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
    }
    text = body.decode()
    assert PASSWORD not in text and "postgresql://" not in text and "T0KEN" not in text and role not in text

    _with_alerts(config, {"webhook_url_env": URL_ENV, "blamed": ["provider"]})
    skipped = _evaluate(config, dagster_instance, result.run_id)
    assert isinstance(skipped, dg.SkipReason)
    assert skipped.skip_message == (
        f"run {result.run_id}: not a transfer, or blamed on a party alerts.blamed (provider) leaves out"
    )
    assert len(webhook) == 1


def test_a_provider_blamed_failure_alerts_the_provider_filter_and_an_unset_url_skips(
    spark, tmp_path: Path, dagster_instance, webhook: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(1, "org_1", ts(1, 2))])
    config = _with_alerts(lake_config(tmp_path), {"webhook_url_env": URL_ENV, "blamed": ["provider"]})
    result = run(config, dagster_instance, ["acme"])

    assert _evaluate(config, dagster_instance, result.run_id) is None

    [body] = webhook
    posted = json.loads(body)
    contract = ("source rows break the model's contract (NULL or duplicate primary key, NULL last-modified): fix the "
                "rows at the source or the model's primary_key")
    assert (posted["blamed"], posted["reason"], posted["recipients"], posted["run_url"]) == (
        "provider", contract, ["acme"], f"/runs/{result.run_id}"
    )
    monkeypatch.delenv(URL_ENV)
    skipped = _evaluate(config, dagster_instance, result.run_id)
    assert isinstance(skipped, dg.SkipReason)
    assert skipped.skip_message == f"${URL_ENV} is not set: export the webhook URL in it to post alerts"
    assert len(webhook) == 1


def test_without_an_alerts_section_there_is_no_alert_sensor(tmp_path: Path) -> None:
    config = lake_config(tmp_path)
    names = [s.name for s in build_definitions(config).sensors]
    assert ALERT_SENSOR not in names
    assert ALERT_SENSOR in [s.name for s in build_definitions(_with_alerts(config, {})).sensors]

"""End to end in headless Chromium: the provider creates a recipient and issues its link; the recipient opens it,
enters a PostgreSQL destination with wrong credentials (the page names the problem), fixes it, tests it and saves
it; the recipient sensor registers it; a transfer delivers its exact rows; the link then shows them. The password
is in no log line, no Dagster event, run tag or config, no file but the vault's (sealed) and no table."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import dagster as dg
import pytest
from dagster._serdes import serialize_value

from incsync.cli.main import main
from incsync.config.load import load_config
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.sensors import build_recipient_sensor
from incsync_tests.onboarding.conftest import Served
from incsync_tests.orchestration.test_sensors_schedules import NOW, _defs_with, _evaluate_sensor
from incsync_tests.support.devtools import browser
from incsync_tests.support.lake import order, ts, write_table

pytestmark = pytest.mark.slow

PASSWORD = "Pw-e2e-onboard-5519-distinctive"
MAX_SCREENSHOT = 200_000
# The recipient fills the form as a person would: the fields by id, then a button.
FILL = """(() => {{ document.querySelector('#f_schema').value = {schema!r};
  document.querySelector('#f_dsn_secret').value = {dsn!r};
  document.querySelector('button[value={action}]').click(); }})()"""


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_a_recipient_connects_its_postgres_in_a_browser_and_receives_exact_rows(
        spark, served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger="websockets")  # the test's own DevTools traffic carries what it types
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    shots = Path(os.environ.get("INCSYNC_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_2", ts(1, 2)),
                                             order(3, "org_2", ts(1, 3), amount=7.5), order(4, "org_3", ts(1, 4))])
    setup, file = served.setup, str(served.setup.file)
    assert main(["onboard", "create", "globex", "--id-in-provider-system", "org_2", "--products", "core", "-c", file]) == 0
    assert main(["onboard", "link", "globex", "-c", file]) == 0
    url = capfd.readouterr().out.splitlines()[-1]
    db = setup.db
    good = f"postgresql://{db.user}:{PASSWORD}@127.0.0.1:5432/{db.name}"
    # The test server trusts local connections, so it checks no password: wrong credentials are a user it lacks.
    wrong = f"postgresql://globex_writer:{PASSWORD}@127.0.0.1:5432/{db.name}"

    with browser(tmp_path / "chromium") as tab:
        tab.open(url)
        assert "Connect the destination where globex receives its data" in tab.text()
        assert tab.run("document.querySelector('#f_dsn_secret').type") == "password"
        tab.run("document.querySelector('#f_schema').value = 'globex'")
        tab.screenshot(shots / "onboarding-form.png")

        tab.submit(FILL.format(schema="globex", dsn=wrong, action="test"))
        text = tab.text()
        assert 'role "globex_writer" does not exist. To fix: check the user and password' in text
        assert "Connection failed" in text
        assert PASSWORD not in tab.run("document.documentElement.outerHTML")  # the secret is never rendered back
        assert tab.run("document.querySelector('#f_schema').value") == "globex"
        tab.screenshot(shots / "onboarding-problem.png")

        tab.submit(FILL.format(schema="globex", dsn=good, action="test"))
        assert "Connection works" in tab.text()
        assert tab.run("document.querySelector('#f_dsn_secret').value") == ""  # typed again to save
        tab.submit(FILL.format(schema="globex", dsn=good, action="save"))
        assert "Your postgres destination is connected" in tab.text()

        config = load_config(setup.file)
        assert [r.id for r in config.recipients if r.enabled] == ["acme", "globex"]
        sensor = build_recipient_sensor(file, config.models, clock=lambda: NOW)
        instance = dg.DagsterInstance.get()
        tick = _evaluate_sensor(sensor, instance, _defs_with(sensor=sensor, config_file=setup.file))
        assert [list(r.partition_keys) for r in tick.dynamic_partitions_requests] == [["acme", "globex"]]
        assert "globex" in instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)

        assert main(["transfer", "orders", "--window", "2024-01-01", "--recipient", "globex", "-c", file]) == 0
        rows = db.execute("SELECT id, organization_id, amount FROM globex.orders ORDER BY id")
        assert rows == [(2, "org_2", 1.0), (3, "org_2", 7.5)]

        tab.open(url)
        text = tab.text()
        assert re.search(r"orders\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+2024-01-01 03:00:00Z\s+2\b", text), text
        tab.screenshot(shots / "onboarding-status.png")

    for shot in ("onboarding-form.png", "onboarding-problem.png", "onboarding-status.png"):
        assert 0 < (shots / shot).stat().st_size < MAX_SCREENSHOT, shot

    output = capfd.readouterr()
    runs = instance.get_runs()
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    events = [serialize_value(e) for run in runs for e in instance.all_logs(run.run_id)]
    events += [serialize_value(r.event_log_entry) for key in instance.get_asset_keys()
               for r in instance.fetch_materializations(key, limit=1000).records]
    assert any("globex" in e for e in events)
    tables = db.execute("SELECT table_schema || '.' || table_name FROM information_schema.tables "
                        "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')")
    dumped = [str(row) for (table,) in tables for row in db.execute(f"SELECT t::text FROM {table} t")]
    assert any("vault:onboard.globex" in row for row in dumped)  # the scan reads the tables onboarding wrote
    assert PASSWORD not in output.out + output.err
    assert [r.getMessage() for r in caplog.records if PASSWORD in r.getMessage()] == []
    assert [e for e in events if PASSWORD in e] == []
    assert [r.run_id for r in runs if PASSWORD in str(r.tags) or PASSWORD in str(r.run_config)] == []
    assert [row for row in dumped if PASSWORD in row] == []
    assert _files_holding(tmp_path, PASSWORD.encode()) == []  # the vault's file holds it sealed only
    assert (tmp_path / "vault.sqlite").is_file()

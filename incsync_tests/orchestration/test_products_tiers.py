"""Products (which models a recipient receives) and schedule tiers (on which cron), through the real
sensor and schedule evaluation on a real (SQLite) instance, and real transfers from a lake source."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml

from incsync.config.load import load_config
from incsync.config.products import frequency_of, kept_copy, receives, schedule_tier
from incsync.core.bounds import UTC
from incsync.errors import ConfigError, NotSubscribedError
from incsync.operations.dagster_compat import read_instance_value
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.schedules import build_model_schedule
from incsync.orchestration.sensors import build_recipient_sensor
from incsync.orchestration.subscriptions import STATE_KEY
from incsync.orchestration.triggers import automation
from incsync_tests.orchestration.test_sensors_schedules import NOW, _defs_with, _evaluate_sensor
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta", "products": ["basic"]},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta", "products": ["enterprise"],
     "tags": {"tier": "gold"}},
]
PRODUCTS = [{"name": "basic", "models": ["orders"]}, {"name": "enterprise", "models": ["orders", "invoices"]}]


def _write(path: Path, doc: dict) -> None:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    later = time.time() + 5  # a new mtime even on coarse file systems: the sensor re-reads the file
    os.utime(path, (later, later))


def _state(instance: dg.DagsterInstance, cursor: str) -> dict:
    """The sensor's registry state the cursor (its digest) names, as stored in the instance."""
    stored = json.loads(read_instance_value(instance, STATE_KEY))
    assert stored["current"]["digest"] == cursor
    return json.loads(stored["current"]["registry"])


def _config(tmp_path: Path, recipients=RECIPIENTS, **top) -> Path:  # noqa: ANN001
    """orders and invoices (the same lake table, two models), with ``top`` keys (products, tiers...)."""
    file = lake_config(tmp_path, recipients=recipients, model={"frequency": "0 0 * * *"})
    doc = yaml.safe_load(file.read_text())
    doc["models"].append({**doc["models"][0], "model_name": "invoices"})
    _write(file, {**doc, **top})
    return file


def test_a_file_without_products_or_tiers_behaves_as_before(tmp_path: Path, monkeypatch) -> None:
    """Every recipient receives every model; a tier tag is a plain tag; one schedule per model, at its frequency."""
    recipients = [{k: v for k, v in r.items() if k != "products"} for r in RECIPIENTS]
    config = load_config(_config(tmp_path, recipients))
    assert [(r.id, m.model_name) for r in config.recipients for m in config.models if receives(config, r, m.model_name)] == [
        ("acme", "orders"), ("acme", "invoices"), ("globex", "orders"), ("globex", "invoices")]
    globex = config.recipient("globex")
    assert schedule_tier(config, globex, "orders") is None and frequency_of(config, globex, config.models[0]) == "0 0 * * *"
    monkeypatch.setenv("INCSYNC_AUTOMATION", "stopped")
    _, schedules = automation(str(tmp_path / "incsync.yaml"), config)
    assert [(s.name, s.cron_schedule) for s in schedules] == [
        ("incsync_orders_schedule", "0 0 * * *"), ("incsync_invoices_schedule", "0 0 * * *")]


def test_unknown_models_products_and_tiers_are_refused_naming_the_fix(tmp_path: Path) -> None:
    recipients = [{**RECIPIENTS[0], "products": ["basik"]}, {**RECIPIENTS[1], "tags": {"tier": "platinum"}}]
    file = _config(tmp_path, recipients, products=[{"name": "basic", "models": ["orders", "invoice"]}],
                   tiers=[{"name": "gold", "frequency": "every 5 minutes", "models": {"order": "*/5 * * * *"}},
                          {"name": "gold-plus"}])
    with pytest.raises(ConfigError) as failed:
        load_config(file)
    assert failed.value.problems == [
        'tiers[1].name: "gold-plus" must match ^[A-Za-z0-9_]+$',
        'products[0].models: model "invoice" of product basic is not a configured model; known: [orders, invoices]; '
        "fix its spelling or add the model under models:",
        'tiers[0].frequency: "every 5 minutes" is not a cron expression (e.g. "*/15 * * * *")',
        'tiers[0].models: model "order" of tier gold is not a configured model; known: [orders, invoices]; '
        "fix its spelling or remove it",
        'recipients[0].products: product "basik" of recipient acme is not a configured product; known: [basic]; '
        "fix its spelling or add it under products:",
        'recipients[1].products: product "enterprise" of recipient globex is not a configured product; known: [basic]; '
        "fix its spelling or add it under products:",
        'recipients[1].tags.tier: tier "platinum" of recipient globex is not a configured tier; known: [gold, gold-plus]; '
        "fix its spelling or add it under tiers:",
    ]


def test_sensor_backfills_only_received_models_then_a_model_a_recipient_starts_receiving(tmp_path: Path, instance) -> None:
    file = _config(tmp_path, products=PRODUCTS)
    models = load_config(file).models
    sensor = build_recipient_sensor(str(file), models, clock=lambda: NOW)
    defs = _defs_with(sensor=sensor, config_file=file)

    first = _evaluate_sensor(sensor, instance, defs)
    assert sorted((r.job_name, r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
                  for r in first.run_requests) == [
        ("invoices", "globex|2024-01-01", "globex|2024-01-03"), ("orders", "acme|2024-01-01", "globex|2024-01-03")]
    assert _state(instance, first.cursor) == {"unsubscribed": {"invoices": ["acme"]}, "tiers": {}}
    assert len(first.cursor) == 24  # a digest: every tick row copies the cursor, so the state itself lives in the instance
    sensor = build_recipient_sensor(str(file), models, clock=lambda: NOW)

    def tick(cursor: str | None):  # noqa: ANN202
        context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs, cursor=cursor)
        return sensor.evaluate_tick(context)

    assert tick(first.cursor).skip_message == "2 recipients registered, none added or removed"

    # acme moves to enterprise: the next tick backfills invoices for acme, from its start, and nothing else.
    doc = yaml.safe_load(file.read_text())
    doc["recipients"][0]["products"] = ["enterprise"]
    _write(file, doc)
    upgraded = tick(first.cursor)
    assert [(r.job_name, r.tags["incsync/recipient"], r.tags["incsync/mode"], r.tags["dagster/asset_partition_range_start"],
             r.tags["dagster/asset_partition_range_end"]) for r in upgraded.run_requests] == [
        ("invoices", "acme", "backfill", "acme|2024-01-01", "acme|2024-01-03")]
    assert upgraded.run_requests[0].run_key.startswith("subscribed:")
    assert _state(instance, upgraded.cursor)["unsubscribed"] == {}

    # Back to basic: no run; the cursor remembers, so subscribing again backfills again.
    doc["recipients"][0]["products"] = ["basic"]
    _write(file, doc)
    downgraded = tick(upgraded.cursor)
    assert downgraded.run_requests == [] and _state(instance, downgraded.cursor)["unsubscribed"] == {"invoices": ["acme"]}
    config = load_config(file)
    assert kept_copy(config, config.recipient("acme"), "invoices") == (
        "recipient acme no longer receives model invoices: incsync stops transferring it and keeps its copy in "
        f"destination acme_delta (delta); to drop the copy, delete the Delta table folder {config.destination('acme_delta').path}"
        "/invoices (subscribing again re-syncs it from the start)")


def test_a_recipient_moving_tier_gets_the_windows_its_old_tier_would_have_run(tmp_path: Path, instance) -> None:
    """Daily cron, hourly windows: moved to gold at 07:20, acme's windows since midnight would be left to no
    schedule (gold's next tick covers 07:15 on); the sensor launches them once."""
    recipients = [{k: v for k, v in r.items() if k != "products"} for r in RECIPIENTS]
    file = _config(tmp_path, recipients, tiers=[{"name": "gold", "frequency": "*/15 * * * *"}])
    doc = yaml.safe_load(file.read_text())
    doc["models"] = doc["models"][:1]
    doc["models"][0]["max_transfer_time_window_seconds"] = 3600
    _write(file, doc)
    models = load_config(file).models
    sensor = build_recipient_sensor(str(file), models, clock=lambda: NOW)
    defs = _defs_with(sensor=sensor, config_file=file)
    first = _evaluate_sensor(sensor, instance, defs)
    assert _state(instance, first.cursor)["tiers"] == {"gold": ["globex"]}

    def tick(cursor: str | None):  # noqa: ANN202
        return sensor.evaluate_tick(dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs, cursor=cursor))

    doc["recipients"][0]["tags"] = {"tier": "gold"}
    _write(file, doc)
    moved = tick(first.cursor)
    assert [(r.tags["incsync/mode"], r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
            for r in moved.run_requests] == [("incremental", "acme|2024-01-03-00:00", "acme|2024-01-03-07:00")]
    assert moved.run_requests[0].run_key.startswith("tier:")
    assert tick(moved.cursor).run_requests == []  # once

    doc["recipients"][0]["tags"] = {}
    _write(file, doc)
    back = tick(moved.cursor)  # from gold (last tick 07:15) to the daily schedule: the open window
    assert [str(r.partition_key) for r in back.run_requests] == ["acme|2024-01-03-07:00"]


def test_schedules_request_only_recipients_that_receive_the_model_on_their_tier(tmp_path: Path, instance, monkeypatch) -> None:
    file = _config(tmp_path, products=PRODUCTS,
                   tiers=[{"name": "gold", "frequency": "*/15 * * * *", "models": {"invoices": "0 * * * *"}}])
    config = load_config(file)
    monkeypatch.setenv("INCSYNC_AUTOMATION", "stopped")
    _, schedules = automation(str(file), config)
    assert [(s.name, s.cron_schedule) for s in schedules] == [
        ("incsync_orders_schedule", "0 0 * * *"), ("incsync_orders_schedule_gold", "*/15 * * * *"),
        ("incsync_invoices_schedule", "0 0 * * *"), ("incsync_invoices_schedule_gold", "0 * * * *")]
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])

    from incsync.orchestration.definitions import build_definitions

    repository = build_definitions(file).get_repository_def()

    def ranges(schedule: dg.ScheduleDefinition, at: datetime) -> list[tuple[str, str]] | str:
        context = dg.build_schedule_context(instance=instance, instance_ref=instance.get_ref(), scheduled_execution_time=at,
                                            repository_def=repository)
        data = schedule.evaluate_tick(context)
        if data.skip_message:
            return data.skip_message
        return [(str(r.partition_key), str(r.partition_key)) if r.partition_key else
                (r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
                for r in data.run_requests]

    by_name = {s.name: s for s in schedules}
    at = datetime(2024, 1, 3, 7, 15, tzinfo=UTC)
    midnight = datetime(2024, 1, 4, tzinfo=UTC)  # the daily tick: the day that closed, and the new one
    assert ranges(by_name["incsync_orders_schedule"], midnight) == [("acme|2024-01-03", "acme|2024-01-04")]
    assert ranges(by_name["incsync_orders_schedule_gold"], at) == [("globex|2024-01-03", "globex|2024-01-03")]
    assert ranges(by_name["incsync_invoices_schedule"], midnight) == (
        "no enabled recipient outside a tier receiving invoices is registered yet")
    assert ranges(by_name["incsync_invoices_schedule_gold"], at) == [("globex|2024-01-03", "globex|2024-01-03")]


def test_ten_thousand_recipients_in_three_tiers_take_full_runs_and_ticks_of_seconds(tmp_path: Path, instance) -> None:
    """The sensor registers each tier's recipients side by side, so every tier's schedule launches runs of
    recipients_per_run (1,000) though the file interleaves the tiers; each tick stays within the existing bound."""
    n, tiers = 10_000, ["gold", "silver", "bronze"]
    recipients = [{"id": f"r{i:05d}", "id_in_provider_system": f"org_{i}", "destination": "files",
                   "tags": {"tier": tiers[i % 3]}} for i in range(n)]
    file = lake_config(
        tmp_path, recipients=recipients, destinations=[{"name": "files", "kind": "object_storage", "path": "./out"}],
        model={"frequency": "0 0 * * *"},
    )
    doc = yaml.safe_load(file.read_text())
    doc["tiers"] = [{"name": "gold", "frequency": "*/15 * * * *"}, {"name": "silver", "frequency": "0 * * * *"},
                    {"name": "bronze", "frequency": "0 */6 * * *"}]
    _write(file, doc)
    config = load_config(file)
    model = config.models[0]
    sensor = build_recipient_sensor(str(file), [model], clock=lambda: NOW)
    data = _evaluate_sensor(sensor, instance, _defs_with(sensor=sensor, config_file=file))
    assert len(data.run_requests) == 10  # the initial backfill knows no tiers: 10,000 / 1,000 runs
    registered = instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
    assert registered[:2] == ["r00002", "r00005"] and registered[-1] == "r09997"  # bronze, gold, silver

    position = {rid: i for i, rid in enumerate(registered)}
    tier_of = {r["id"]: r["tags"]["tier"] for r in recipients}
    for tier, cron in [("gold", "*/15 * * * *"), ("silver", "0 * * * *"), ("bronze", "0 */6 * * *")]:
        schedule = build_model_schedule(str(file), model, tier=tier, frequency=cron)
        assert schedule.cron_schedule == cron
        context = dg.build_schedule_context(instance=instance, instance_ref=instance.get_ref(), scheduled_execution_time=datetime(2024, 1, 3, 6, tzinfo=UTC))
        started = time.monotonic()
        requests = list(schedule.evaluate_tick(context).run_requests or [])
        seconds = time.monotonic() - started
        covered = []
        for r in requests:
            first, last = (r.tags[f"dagster/asset_partition_range_{end}"].split("|")[0] for end in ("start", "end"))
            covered += registered[position[first]: position[last] + 1]
        assert len(requests) == 4 and seconds < 10, (tier, len(requests), seconds)  # 3,333 or 3,334 recipients
        assert sorted(covered) == sorted(rid for rid, t in tier_of.items() if t == tier)
        assert {r.tags["incsync/tag/tier"] for r in requests} == {tier}
    default = build_model_schedule(str(file), model)
    context = dg.build_schedule_context(instance=instance, instance_ref=instance.get_ref(), scheduled_execution_time=datetime(2024, 1, 3, tzinfo=UTC))
    assert default.evaluate_tick(context).skip_message == "no enabled recipient outside a tier is registered yet"


def test_a_recipient_not_receiving_a_model_is_refused_by_transfer_and_the_ui_and_skipped_without_recipient(
    tmp_path: Path, instance, monkeypatch, spark, capsys
) -> None:
    from incsync.cli.main import main
    from incsync.integrity.verify import recipients_of
    from incsync.operations.runs import failure_message
    from incsync.orchestration.definitions import build_definitions
    from incsync_tests.support.lake import materialize_partition

    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_2", ts(1, 2)), order(3, "org_2", ts(1, 3))])
    file = _config(tmp_path, products=PRODUCTS)
    # The CLI finds `instance` through DAGSTER_HOME, which the fixture sets (and restores) itself.
    assert os.environ["DAGSTER_HOME"] == str(tmp_path / "dagster_home")
    monkeypatch.chdir(tmp_path)
    config = load_config(file)
    acme_copy = Path(config.destination("acme_delta").path) / "invoices"
    refusal = ("recipient acme does not receive model invoices: its products [basic] do not hold it; "
               "add product enterprise to its products")

    assert main(["transfer", "invoices", "--recipient", "acme", "--window", "2024-01-01", "-c", str(file)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {refusal}"
    assert main(["transfer", "invoices", "--window", "2024-01-01", "-c", str(file)]) == 0
    assert [r["id"] for r in delta_rows(Path(config.destination("globex_delta").path) / "invoices")] == [2, 3]
    assert not acme_copy.exists()

    # A partition the UI offers (the recipient set is shared): the run fails before Spark, a lease or the destination.
    result = materialize_partition(build_definitions(file), instance, window="2024-01-01", recipient="acme",
                                   model_key=("lake", "invoices"), raise_on_error=False)
    assert not result.success
    assert failure_message(instance, result.run_id) == f"NotSubscribedError: model invoices: {refusal}"
    assert not acme_copy.exists()

    # `incsync transfers --product`: runs of the product's models for its subscribers (acme's refused run is not).
    capsys.readouterr()
    assert main(["transfers", "--product", "enterprise", "--json", "-c", str(file)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(t["models"], t["recipients"], t["status"]) for t in listed] == [(["invoices"], ["globex"], "SUCCESS")]
    assert main(["transfers", "--product", "basic", "--json", "-c", str(file)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["transfers", "--product", "gold", "-c", str(file)]) == 2
    assert capsys.readouterr().err.strip() == 'error: unknown product "gold"; known: basic, enterprise'

    assert [r.id for r in recipients_of(config, config.model("invoices"), None)] == ["globex"]
    with pytest.raises(NotSubscribedError, match="add product enterprise to its products"):
        recipients_of(config, config.model("invoices"), ["acme"])

    # acme joins enterprise: the sensor's backfill of invoices for acme, executed, brings acme's rows only.
    defs = build_definitions(file)
    sensor = build_recipient_sensor(str(file), config.models, clock=lambda: NOW)
    context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs)
    recorded = sensor.evaluate_tick(context)
    assert recorded.run_requests == []
    doc = yaml.safe_load(file.read_text())
    doc["recipients"][0]["products"] = ["enterprise"]
    _write(file, doc)
    context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs,
                                      cursor=recorded.cursor)
    [request] = sensor.evaluate_tick(context).run_requests
    ran = defs.resolve_job_def(request.job_name).execute_in_process(
        instance=instance, tags=request.tags, asset_selection=request.asset_selection)
    assert ran.success
    assert [r["id"] for r in delta_rows(acme_copy)] == [1]


def test_the_sensor_state_survives_a_tick_whose_cursor_was_not_committed(tmp_path: Path, instance) -> None:
    """A tick that stored its state and then failed leaves the previous cursor in place: it still names a state."""
    from incsync.orchestration.subscriptions import Registry

    older = Registry({"invoices": {"acme"}}, {"globex": "gold"})
    first = older.save(instance, None)
    newer = Registry({}, {"globex": "gold", "acme": "gold"})
    assert newer.save(instance, first) != first  # this tick's cursor is lost...
    assert Registry.load(instance, first) == older  # ...and the next tick, given the old one, reads the old state
    assert Registry.load(instance, "0" * 24) == Registry({}, None)  # unknown: nothing to compare against

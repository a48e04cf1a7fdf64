"""The recipient sensor and the model schedules, evaluated against a real (SQLite) instance."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import dagster as dg
import yaml

from incsync.config.load import load_config
from incsync.config.tags import transfer_run_tags
from incsync.core.bounds import UTC
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.orchestration.schedules import build_model_schedule, schedule_name
from incsync.orchestration.sensors import build_recipient_sensor
from incsync.orchestration.triggers import automation
from incsync_tests.support.lake import lake_config

NOW = datetime(2024, 1, 3, 7, 20, tzinfo=UTC)
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta", "tags": {"tier": "gold"}},
    {
        "id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta",
        "default_full_refresh_min_start_time_epoch": 1704153600,  # 2024-01-02
    },
    {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_delta", "enabled": False},
]


def _evaluate_sensor(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, defs: dg.Definitions):
    context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs)
    data = sensor.evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:  # the daemon applies them; a unit test must
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return data


def _defs_with(sensor=None, schedule=None, config_file: Path | None = None) -> dg.Definitions:
    from incsync.orchestration.definitions import build_definitions

    base = build_definitions(config_file)
    return dg.Definitions.merge(
        dg.Definitions(assets=list(base.assets or []), resources=base.resources),
        dg.Definitions(sensors=[sensor] if sensor else [], schedules=[schedule] if schedule else []),
    )


def test_sensor_registers_enabled_recipients_and_launches_their_initial_backfill(tmp_path: Path, instance):
    config_file = lake_config(tmp_path, recipients=RECIPIENTS)
    models = load_config(config_file).models
    sensor = build_recipient_sensor(str(config_file), models, clock=lambda: NOW)
    defs = _defs_with(sensor=sensor, config_file=config_file)

    data = _evaluate_sensor(sensor, instance, defs)

    assert [(r.partitions_def_name, list(r.partition_keys)) for r in data.dynamic_partitions_requests] == [
        (RECIPIENTS_PARTITIONS, ["acme", "globex"])
    ]
    by_recipient = {r.tags["incsync/recipient"]: r for r in data.run_requests}
    assert sorted(by_recipient) == ["acme", "globex"]
    acme = by_recipient["acme"]
    assert acme.asset_selection == [dg.AssetKey(["lake", "orders"])]
    assert {k: v for k, v in acme.tags.items()} == {
        "incsync/model": "orders",
        "incsync/recipient": "acme",
        "incsync/source": "lake",
        "incsync/destination": "acme_delta",
        "incsync/model_destination": "orders@acme_delta",
        "incsync/source-slots-10": "lake",  # the source's limit (10) and the destination's (1)
        "incsync/destination-slots-1": "acme_delta",
        "incsync/mode": "backfill",
        "incsync/tag/tier": "gold",
        "dagster/asset_partition_range_start": "acme|2024-01-01",
        "dagster/asset_partition_range_end": "acme|2024-01-03",
        "dagster/sensor_name": "incsync_recipients",
    }
    assert by_recipient["globex"].tags["dagster/asset_partition_range_start"] == "globex|2024-01-02"
    assert instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS) == ["acme", "globex"]

    # Nothing changed: the next tick skips without asking for anything.
    again = _evaluate_sensor(sensor, instance, defs)
    assert again.run_requests == [] and again.skip_message == "2 recipients registered, none added or removed"

    # Disable acme, enable initech: the registry file is re-read on its next tick.
    doc = yaml.safe_load(config_file.read_text())
    doc["recipients"][0]["enabled"] = False
    doc["recipients"][2]["enabled"] = True
    config_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    later = time.time() + 5  # a different mtime even on coarse-grained file systems
    import os

    os.utime(config_file, (later, later))
    changed = _evaluate_sensor(sensor, instance, defs)
    assert [(type(r).__name__, list(r.partition_keys)) for r in changed.dynamic_partitions_requests] == [
        ("AddDynamicPartitionsRequest", ["initech"]),
        ("DeleteDynamicPartitionsRequest", ["acme"]),
    ]
    assert [r.tags["incsync/recipient"] for r in changed.run_requests] == ["initech"]
    assert sorted(instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)) == ["globex", "initech"]


def test_schedule_requests_the_open_window_and_the_one_closed_since_the_last_tick(tmp_path: Path, instance):
    config_file = lake_config(tmp_path, recipients=RECIPIENTS, model={"frequency": "*/15 * * * *"})
    model = load_config(config_file).models[0]
    schedule = build_model_schedule(str(config_file), model)
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex", "initech"])

    def tick(at: datetime) -> list[dg.RunRequest]:
        context = dg.build_schedule_context(instance=instance, instance_ref=instance.get_ref(), scheduled_execution_time=at)
        return list(schedule.evaluate_tick(context).run_requests or [])

    # One run for both enabled recipients (one read, see "Transfer plans"); initech is disabled.
    mid_day = tick(datetime(2024, 1, 3, 7, 15, tzinfo=UTC))
    assert [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"]) for r in mid_day] == [
        ("acme|2024-01-03", "globex|2024-01-03")
    ]
    assert {k: v for k, v in mid_day[0].tags.items() if k.startswith("incsync/")} == {
        "incsync/model": "orders", "incsync/source": "lake", "incsync/source-slots-10": "lake",
        "incsync/shard": "orders:2024-01-03:0", "incsync/mode": "incremental",
    }
    assert mid_day[0].run_key == "tick:2024-01-03T07:15:00+00:00:orders:2024-01-03:acme..globex"
    assert (schedule.job_name, mid_day[0].job_name) == ("orders", "orders")  # runs named after the model

    after_midnight = tick(datetime(2024, 1, 4, 0, 0, tzinfo=UTC))
    assert [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"]) for r in after_midnight] == [
        ("acme|2024-01-03", "globex|2024-01-04")
    ]
    assert [r.tags["dagster/asset_partition_range_start"] for r in tick(datetime(2024, 1, 4, 0, 15, tzinfo=UTC))] == [
        "acme|2024-01-04"
    ]


def test_schedule_shards_recipients_contiguous_in_registration_order(tmp_path: Path, instance):
    recipients = [
        {"id": f"r{i}", "id_in_provider_system": f"org_{i}", "destination": f"r{i}_delta", "tags": {"tier": "gold"}}
        for i in range(5)
    ]
    recipients[2]["enabled"] = False
    config_file = lake_config(tmp_path, recipients=recipients, model={"frequency": "*/15 * * * *"})
    doc = yaml.safe_load(config_file.read_text())
    doc["recipients_per_run"] = 2
    config_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    model = load_config(config_file).models[0]
    schedule = build_model_schedule(str(config_file), model)
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["r0", "r1", "r2", "r3", "r4"])
    context = dg.build_schedule_context(
        instance=instance, instance_ref=instance.get_ref(), scheduled_execution_time=datetime(2024, 1, 3, 7, 15, tzinfo=UTC)
    )
    requests = list(schedule.evaluate_tick(context).run_requests or [])
    # r2 (disabled, still registered) splits the range: a run's recipient range holds all registered between its ends.
    assert [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"]) for r in requests[:2]] == [
        ("r0|2024-01-03", "r1|2024-01-03"), ("r3|2024-01-03", "r4|2024-01-03"),
    ]
    assert requests[0].tags["incsync/tag/tier"] == "gold" and "incsync/recipient" not in requests[0].tags
    assert len(requests) == 2


def test_definitions_register_the_sensor_and_one_schedule_per_model(tmp_path: Path, monkeypatch):
    config_file = lake_config(tmp_path, recipients=RECIPIENTS, model={"frequency": "5 * * * *"})
    monkeypatch.setenv("INCSYNC_AUTOMATION", "stopped")
    sensors, schedules = automation(str(config_file), load_config(config_file))
    assert [s.name for s in sensors] == ["incsync_recipients", "incsync_reaper"]
    assert [(s.name, s.cron_schedule, s.default_status) for s in schedules] == [
        (schedule_name(load_config(config_file).models[0]), "5 * * * *", dg.DefaultScheduleStatus.STOPPED)
    ]
    assert {s.default_status for s in sensors} == {dg.DefaultSensorStatus.STOPPED}


def test_ten_thousand_recipients_take_ten_runs_and_ticks_of_seconds(tmp_path: Path, instance):
    """docs/design.md#batched-launches: runs of recipients_per_run (1,000) recipients; ticks stay cheap at scale."""
    n = 10_000
    recipients = [{"id": f"r{i:05d}", "id_in_provider_system": f"org_{i}", "destination": "files"} for i in range(n)]
    config_file = lake_config(
        tmp_path, recipients=recipients, destinations=[{"name": "files", "kind": "object_storage", "path": "./out"}],
        model={"frequency": "*/15 * * * *"},
    )
    model = load_config(config_file).models[0]
    sensor = build_recipient_sensor(str(config_file), [model], clock=lambda: NOW)

    started = time.monotonic()
    data = _evaluate_sensor(sensor, instance, _defs_with(sensor=sensor, config_file=config_file))
    sensor_seconds = time.monotonic() - started
    assert len(data.run_requests) == 10
    assert [r.tags["dagster/asset_partition_range_start"] for r in data.run_requests[:2]] == ["r00000|2024-01-01", "r01000|2024-01-01"]
    assert data.run_requests[-1].tags["dagster/asset_partition_range_end"] == "r09999|2024-01-03"

    schedule = build_model_schedule(str(config_file), model)
    context = dg.build_schedule_context(instance=instance, instance_ref=instance.get_ref(), scheduled_execution_time=NOW)
    started = time.monotonic()
    requests = list(schedule.evaluate_tick(context).run_requests or [])
    schedule_seconds = time.monotonic() - started
    assert len(requests) == 10
    assert {r.tags["dagster/asset_partition_range_start"][-10:] for r in requests} == {"2024-01-03"}
    assert sensor_seconds < 10 and schedule_seconds < 10, (sensor_seconds, schedule_seconds)


def test_ten_thousand_destinations_make_one_limit_entry_per_distinct_limit(tmp_path: Path) -> None:
    """The instance config Dagster passes to its code server on the command line stays small."""
    from incsync.operations.concurrency import dagster_yaml

    n = 10_000
    recipients = [{"id": f"r{i:05d}", "id_in_provider_system": f"org_{i}", "destination": f"d{i}"} for i in range(n)]
    destinations = [{"name": f"d{i}", "kind": "delta", "path": f"./out/r{i:05d}", "max_concurrent_transfers": 1 + (i % 2) * 2}
                    for i in range(n)]
    config = load_config(lake_config(tmp_path, recipients=recipients, destinations=destinations))
    text = dagster_yaml(config)
    assert len(text) < 2_000
    limits = yaml.safe_load(text)["concurrency"]["runs"]["tag_concurrency_limits"]
    assert [(e["key"], e["limit"]) for e in limits] == [
        ("incsync/model_destination", 1), ("incsync/shard", 1), ("incsync/source-slots-10", 10),
        ("incsync/destination-slots-1", 1), ("incsync/destination-slots-3", 3),
    ]
    tags = transfer_run_tags(config, config.models[0], config.recipient("r00001"), mode="incremental")
    assert tags["incsync/destination-slots-3"] == "d1" and "incsync/destination-slots-1" not in tags


def test_runs_at_once_default_to_one_per_cpu_with_local_spark(tmp_path: Path) -> None:
    from incsync.operations.concurrency import dagster_yaml, default_max_concurrent_runs

    config = load_config(lake_config(tmp_path))
    assert default_max_concurrent_runs(config, cpus=2) == 2
    assert default_max_concurrent_runs(config, cpus=64) == 10
    remote = config.model_copy(update={"spark": {"spark.remote": "sc://127.0.0.1:15002"}})
    cluster = config.model_copy(update={"spark": {"spark.master": "spark://10.0.0.5:7077"}})
    assert default_max_concurrent_runs(remote, cpus=2) == default_max_concurrent_runs(cluster, cpus=2) == 10
    repo_yaml = Path(__file__).resolve().parents[2] / "dagster.yaml"
    generated = yaml.safe_load(dagster_yaml(config, repo_yaml))["concurrency"]["runs"]
    assert generated["max_concurrent_runs"] == default_max_concurrent_runs(config)


def test_generated_instance_checks_the_queue_every_second_and_submits_tick_runs_from_threads(tmp_path: Path) -> None:
    """The settings reach a real instance (Dagster validates the file), and a base's own choice wins."""
    from incsync.operations.concurrency import dagster_yaml, default_max_concurrent_runs

    config = load_config(lake_config(tmp_path))
    repo_yaml = Path(__file__).resolve().parents[2] / "dagster.yaml"
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(dagster_yaml(config, repo_yaml, dagster_home=home))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        assert instance.get_scheduler_settings() == {"use_threads": True, "num_workers": 4, "num_submit_workers": 4}
        assert instance.get_sensor_settings()["num_submit_workers"] == 4
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == default_max_concurrent_runs(config)

    base = tmp_path / "base.yaml"
    base.write_text("schedules:\n  use_threads: false\nrun_coordinator:\n  module: dagster._core.run_coordinator\n"
                    "  class: DefaultRunCoordinator\n")
    doc = yaml.safe_load(dagster_yaml(config, base))
    assert doc["schedules"] == {"use_threads": False} and doc["run_coordinator"]["class"] == "DefaultRunCoordinator"

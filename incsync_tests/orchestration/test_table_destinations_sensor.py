"""The recipient sensor over destinations kept in a table: rows added, changed, broken and removed between ticks,
each tick evaluated as the daemon evaluates it. A broken or removed destination row disables its recipients
(their partitions go, nothing is deleted) and is logged; the others are untouched."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg

from incsync.config.load import load_config
from incsync.config.model import ModelConfig
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, split_key
from incsync.orchestration.resources import cached_config
from incsync.orchestration.sensors import build_recipient_sensor
from incsync_tests.config.test_destinations_table import (
    DESTINATIONS,
    RECIPIENTS,
    add_destination,
    add_recipient,
    table_config,
)
from incsync_tests.orchestration.test_sensors_schedules import NOW, _defs_with
from incsync_tests.support.jdbc import pg_database


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(getattr(record, "dagster_meta", {}).get("orig_message") or record.getMessage())


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, defs: dg.Definitions) -> tuple[dg.SensorResult, list[str]]:
    """One tick as the daemon evaluates it (its partition requests applied), and the warnings it logged."""
    context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs)
    handler = _Lines()
    context.log.addHandler(handler)
    data = sensor.evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return data, handler.lines


def _changes(data: dg.SensorResult) -> list[tuple[str, list[str]]]:
    return [(type(r).__name__.removesuffix("DynamicPartitionsRequest"), list(r.partition_keys))
            for r in data.dynamic_partitions_requests or []]


def _backfilled(data: dg.SensorResult, model: ModelConfig) -> list[tuple[str, str]]:
    """The first and last recipient of each initial backfill's range (a run holds a range of them)."""
    ends = [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
            for r in data.run_requests or []]
    return [(split_key(model, a).recipient_id, split_key(model, b).recipient_id) for a, b in ends]


def test_the_sensor_follows_destination_rows_added_changed_broken_and_removed(
        tmp_path: Path, dagster_instance: dg.DagsterInstance) -> None:
    with pg_database() as db:
        db.execute(RECIPIENTS)
        db.execute(DESTINATIONS)
        add_destination(db, "globex_pg", "postgres", {"schema": "globex"}, "vault:globex_pg")
        add_destination(db, "hooli_delta", "delta", {"path": "./out/hooli"})
        add_recipient(db, "globex", "org_2", "globex_pg")
        add_recipient(db, "hooli", "org_3", "hooli_delta")
        config_file = table_config(tmp_path, db)
        [model] = load_config(config_file).models
        sensor = build_recipient_sensor(str(config_file), [model], clock=lambda: NOW)
        defs = _defs_with(sensor=sensor, config_file=config_file)

        first, _ = _tick(sensor, dagster_instance, defs)
        assert _changes(first) == [("Add", ["acme", "globex", "hooli"])]
        assert _backfilled(first, model) == [("acme", "hooli")]

        add_destination(db, "initech_delta", "delta", {"path": "./out/initech"})  # added
        add_recipient(db, "initech", "org_4", "initech_delta")
        db.execute("UPDATE public.incsync_destinations SET fields = '{\"path\": 5}' WHERE name = 'hooli_delta'")  # broken
        second, warned = _tick(sensor, dagster_instance, defs)
        assert _changes(second) == [("Add", ["initech"]), ("Delete", ["hooli"])]
        assert _backfilled(second, model) == [("initech", "initech")]
        label = 'destinations_table (public.incsync_destinations, row name "hooli_delta")'
        assert warned == [f"{label}.path: expected text; quote it", f"{label}: so recipient(s) hooli are disabled until it is fixed"]

        db.execute("UPDATE public.incsync_destinations SET fields = '{\"path\": \"./out/hooli2\"}' WHERE name = 'hooli_delta'")
        db.execute("UPDATE public.incsync_destinations SET fields = '{\"schema\": \"globex2\"}' WHERE name = 'globex_pg'")
        third, warned = _tick(sensor, dagster_instance, defs)  # fixed, and changed
        assert warned == []
        assert _changes(third) == [("Add", ["hooli"])]
        assert _backfilled(third, model) == [("hooli", "hooli")]
        changed = cached_config(str(config_file))  # what the sensor and the runs read
        assert (changed.destination("globex_pg").schema_name, changed.destination("hooli_delta").path) == (
            "globex2", str(tmp_path / "out" / "hooli2"))
        assert changed.refused_rows == ()

        (tmp_path / "out" / "initech").mkdir(parents=True)
        (tmp_path / "out" / "initech" / "kept.txt").write_text("a copy")
        db.execute("DELETE FROM public.incsync_destinations WHERE name = 'initech_delta'")  # removed
        fourth, warned = _tick(sensor, dagster_instance, defs)
        assert _changes(fourth) == [("Delete", ["initech"])]
        assert warned == ['recipients_from (public.incsync_recipients, row id "initech").destination: "initech_delta" is '
                          "not a configured destination; known: [files, globex_pg, hooli_delta]"]
        assert (tmp_path / "out" / "initech" / "kept.txt").read_text() == "a copy"  # disabled, never deleted
        assert dagster_instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS) == ["acme", "globex", "hooli"]
        assert _tick(sensor, dagster_instance, defs)[0].run_requests == []  # settled

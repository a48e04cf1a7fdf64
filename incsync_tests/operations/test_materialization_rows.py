"""A run's materializations stored from a template (``dagster_compat.events``) are, byte for byte, the
events Dagster's own path stores, on incsync's SQLite event log and on dagster-postgres' (issue 29)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
import yaml
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._serdes import deserialize_value, serialize_value

import incsync.operations.dagster_compat.events as events
from incsync.operations.dagster_compat import DEFER_ASSET_EVENTS_TAG, materialization_reporter, report_materialized
from incsync_tests.support.destinations import postgres_database

KEYS = ["a", "b|ü 1", "c", "d", "e", "f"]
PARTS = dg.StaticPartitionsDefinition(KEYS)
SCHEMA = dg.TableSchema(columns=[dg.TableColumn(name="id", type="bigint")])


def _metadata(i: int) -> dict[str, dg.MetadataValue]:
    """Every kind incsync's materializations carry, with edge values; the fifth has a table schema
    (serialized by serdes), the sixth a null where the others hold a value (another shape)."""
    texts = ["", 'quote " and \\ backslash', "ü ✓ 😀", "\n\t\x00", '"@@incsync-slot-3@@"', "plain"]
    floats = [0.1, 1e-7, -0.0, 1e300, math.nan, math.inf]
    metadata = {
        "rows_transferred": dg.MetadataValue.int([0, -1, 2**62, 7, 77777777777000004, 1][i]),
        "high_watermark": dg.MetadataValue.timestamp([0.0, 1735689600.123456, 1.5, 2e9, 3.25, 4.0][i]),
        "epoch": dg.MetadataValue.null(),
        "transfer_id": dg.MetadataValue.text(texts[i]),
        "duration_seconds": dg.MetadataValue.float(floats[i]),
        "destination_path": dg.MetadataValue.path(f"/lake/orders {i}"),
        "transfer_record": dg.MetadataValue.url(["/assets/orders?partition=2025-01-01|r1", "http://h/x?a=1&b=\"ü\"", "", "u", "v", "w"][i]),
    }
    if i == 4:
        metadata["dagster/column_schema"] = dg.MetadataValue.table_schema(SCHEMA)
    if i == 5:
        metadata["transfer_id"] = dg.MetadataValue.null()
    return metadata


class _Reporting(dg.ConfigurableIOManager):
    fast: bool

    def handle_output(self, context: dg.OutputContext, obj: int) -> None:
        materializations = [dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=_metadata(i))
                            for i, key in enumerate(KEYS)]
        report = materialization_reporter(context) if self.fast else (lambda ms: report_materialized(context, ms))
        report(materializations[:3])
        report(materializations[3:])

    def load_input(self, context: dg.InputContext) -> None:
        return None


@dg.asset(partitions_def=PARTS, io_manager_key="reporting")
def shipped() -> int:
    return 1


def _stored(instance: dg.DagsterInstance, fast: bool) -> tuple[str, list[str], list[Any]]:
    result = dg.materialize(
        [shipped], instance=instance, resources={"reporting": _Reporting(fast=fast)}, raise_on_error=True,
        tags={DEFER_ASSET_EVENTS_TAG: "true", "dagster/asset_partition_range_start": KEYS[0],
              "dagster/asset_partition_range_end": KEYS[-1]},
    )
    storage = instance.event_log_storage
    table = SqlEventLogStorageTable
    query = (sa.select(table.c.event, table.c.partition, table.c.dagster_event_type, table.c.asset_key, table.c.step_key)
             .where(table.c.run_id == result.run_id, table.c.dagster_event_type == "ASSET_MATERIALIZATION")
             .order_by(table.c.id))
    with (storage.index_connection() if hasattr(storage, "index_connection") else storage._connect()) as conn:  # noqa: SLF001
        rows = conn.execute(query).fetchall()
    texts = [row[0] for row in rows]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(k, "ASSET_MATERIALIZATION", '["shipped"]', "shipped") for k in KEYS]
    return result.run_id, texts, [deserialize_value(t) for t in texts]


def _comparable(run_id: str, entry: Any) -> str:
    """The stored text without what differs between any two runs (its id, the time, the process)."""
    text = serialize_value(entry._replace(timestamp=0.0, dagster_event=entry.dagster_event._replace(pid=0)))
    return text.replace(run_id, "<run>")


@contextlib.contextmanager
def _instance(kind: str, tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    home = tmp_path / kind
    home.mkdir()
    if kind == "postgres":
        with postgres_database() as dsn:
            url = "postgresql+psycopg2://" + dsn.split("://", 1)[1]
            (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}}}))
            with dg.DagsterInstance.from_config(str(home)) as instance:
                yield instance
        return
    storage = {"module": "incsync.operations.dagster_compat", "class": "BatchingSqliteEventLogStorage",
               "config": {"base_dir": str(home / "runs")}}
    with dg.instance_for_test(temp_dir=str(home), overrides={"event_log_storage": storage}) as instance:
        yield instance


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_templated_materializations_are_the_events_dagster_stores(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    with _instance(kind, tmp_path) as instance:
        dagster_run, dagster_texts, dagster_entries = _stored(instance, fast=False)
        fast_run, fast_texts, fast_entries = _stored(instance, fast=True)
        # Byte for byte what serdes writes for the entry read back (the template's text is serdes' text)...
        assert fast_texts == [serialize_value(e) for e in fast_entries]
        # ...and the entry Dagster's log manager builds, but for the run, the time and the process.
        assert [_comparable(fast_run, e) for e in fast_entries] == [_comparable(dagster_run, e) for e in dagster_entries]
        assert math.isnan(fast_entries[4].asset_materialization.metadata["duration_seconds"].value)
        assert fast_entries[2].asset_materialization.metadata["transfer_id"].value == "ü ✓ 😀"
        assert instance.get_materialized_partitions(shipped.key) == set(KEYS)
        latest = instance.get_latest_materialization_event(shipped.key)
        assert (latest.run_id, latest.asset_materialization.partition) == (fast_run, KEYS[-1])
        assert instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(shipped.key) == {}


def test_every_kind_an_empty_window_carries_is_templated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty window's event (counts, transfer id, a link to the commit's record) is filled into a template,
    never walked by serdes: a day one stores millions of them (serdes was most of a run's time when the link,
    a URL, was not one of the template's kinds)."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    filled = []
    fill = events._fill
    monkeypatch.setattr(events, "_fill", lambda template, m, timestamp: filled.append(m.partition) or fill(template, m, timestamp))
    with _instance("sqlite", tmp_path) as instance:
        _run, texts, entries = _stored(instance, fast=True)
    assert texts == [serialize_value(e) for e in entries]
    # The fifth has a table schema (serdes); the template's check fills each shape's first event once more.
    assert sorted(set(filled)) == sorted(k for i, k in enumerate(KEYS) if i != 4)
    assert entries[1].asset_materialization.metadata["transfer_record"].value == 'http://h/x?a=1&b="ü"'


def test_a_template_that_does_not_reproduce_serdes_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A Dagster whose serialization no longer matches the template loses speed, never exactness."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    monkeypatch.setattr(events, "_fill", lambda template, m, timestamp: "{}")  # a template gone wrong
    with _instance("sqlite", tmp_path) as instance, caplog.at_level(logging.WARNING):
        _run, texts, entries = _stored(instance, fast=True)
    assert texts == [serialize_value(e) for e in entries]
    assert [e.asset_materialization.metadata["rows_transferred"].value for e in entries] == [0, -1, 2**62, 7, 77777777777000004, 1]
    assert caplog.text.count("materializations of shipped are serialized by Dagster's serdes") == 1


MANY = [f"w{i:03d}" for i in range(40)]


class _ReportingMany(dg.ConfigurableIOManager):
    def handle_output(self, context: dg.OutputContext, obj: int) -> None:
        materializations = [dg.AssetMaterialization(asset_key=context.asset_key, partition=key,
                                                    metadata={"rows_transferred": dg.MetadataValue.int(i)})
                            for i, key in enumerate(MANY)]
        materialization_reporter(context)(materializations)  # one report: eight batches of five

    def load_input(self, context: dg.InputContext) -> None:
        return None


@dg.asset(partitions_def=dg.StaticPartitionsDefinition(MANY), io_manager_key="reporting")
def many() -> int:
    return 1


def test_a_reports_batches_reach_postgres_in_parallel_and_the_last_holds_the_highest_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import incsync.operations.dagster_compat as compat
    import incsync.operations.dagster_compat.postgres as pg

    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    monkeypatch.setattr(compat, "_ROWS_PER_INSERT", 5)
    inserts: list[tuple[str, str, str]] = []  # (thread, first partition, last partition)
    insert = pg._insert

    def recorded(storage: Any, rows: list[dict[str, Any]]) -> list[int]:
        inserts.append((threading.current_thread().name, rows[0]["partition"], rows[-1]["partition"]))
        return insert(storage, rows)

    monkeypatch.setattr(pg, "_insert", recorded)
    with _instance("postgres", tmp_path) as instance:
        result = dg.materialize([many], instance=instance, resources={"reporting": _ReportingMany()}, raise_on_error=True,
                                tags={DEFER_ASSET_EVENTS_TAG: "true", "dagster/asset_partition_range_start": MANY[0],
                                      "dagster/asset_partition_range_end": MANY[-1]})
        records = instance.fetch_materializations(many.key, limit=100).records
        assert sorted(r.asset_materialization.partition for r in records) == MANY
        assert sorted(r.asset_materialization.metadata["rows_transferred"].value for r in records) == list(range(40))
        newest = max(records, key=lambda r: r.storage_id)
        assert newest.asset_materialization.partition == MANY[-1]  # the last batch went in after the others
        latest = instance.get_latest_materialization_event(many.key)  # the asset's row, from the last event
        assert (latest.run_id, latest.asset_materialization.partition) == (result.run_id, MANY[-1])
        assert instance.get_materialized_partitions(many.key) == set(MANY)
    assert sorted((first, last) for _, first, last in inserts) == [(MANY[i], MANY[i + 4]) for i in range(0, 40, 5)]
    assert inserts[-1][1:] == (MANY[35], MANY[39]) and not inserts[-1][0].startswith("incsync-event-insert")
    assert {thread for thread, _, _ in inserts[:-1]} <= {f"incsync-event-insert_{i}" for i in range(pg.PARALLEL_INSERTS)}


@contextlib.contextmanager
def _compact_instance(kind: str, tmp_path: Path) -> Iterator[tuple[dg.DagsterInstance, Path, dict[str, str]]]:
    """An instance on incsync's compact event log as its dagster.yaml names it (what `incsync dagster-yaml`
    writes): its folder and the environment another process needs to open it."""
    from incsync.operations.dagster_compat import event_log_storage_config
    from incsync.operations.dagster_compat.postgres import postgres_storage_sections

    home = tmp_path / kind
    home.mkdir()
    with contextlib.ExitStack() as stack:
        if kind == "postgres":
            dsn = stack.enter_context(postgres_database())
            doc = postgres_storage_sections({"postgres_url": "postgresql+psycopg2://" + dsn.split("://", 1)[1]})
        else:
            doc = {"event_log_storage": event_log_storage_config(home)}
        (home / "dagster.yaml").write_text(yaml.safe_dump(doc))
        with dg.DagsterInstance.from_config(str(home)) as instance:
            yield instance, home, {"DAGSTER_HOME": str(home)}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_materializations_are_stored_once_as_compact_text_and_every_reader_gets_the_events(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os
    import subprocess
    import sys

    from incsync.operations.dagster_compat.compact import MARK, expand

    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    with _compact_instance(kind, tmp_path) as (instance, home, env):
        dagster_run, _, dagster_entries = _stored(instance, fast=False)
        run_id, texts, entries = _stored(instance, fast=True)
        # Read back as the JSON serdes writes, the same events as Dagster's own path (but for run, time, process).
        assert texts == [serialize_value(e) for e in entries]
        assert [_comparable(run_id, e) for e in entries] == [_comparable(dagster_run, e) for e in dagster_entries]
        # Stored as compact text, a fraction of the JSON; Dagster's own events stay JSON.
        storage = instance.event_log_storage
        raw = "SELECT event, dagster_event_type FROM event_logs WHERE run_id = :run ORDER BY id"
        with (storage.index_connection() if kind == "sqlite" else storage._connect()) as conn:  # noqa: SLF001
            rows = conn.execute(sa.text(raw), {"run": run_id}).fetchall()
            dagster_rows = conn.execute(sa.text(raw), {"run": dagster_run}).fetchall()
        stored = [event for event, kind_ in rows if kind_ == "ASSET_MATERIALIZATION"]
        assert len(stored) == len(KEYS) and all(s.startswith(MARK) for s in stored)
        assert [expand(s) for s in stored] == texts
        assert sum(map(len, stored)) * 3 < sum(map(len, texts))
        assert all(event.startswith("{") for event, _ in dagster_rows)
        if kind == "sqlite":  # once: in the index shard, not again in the run's shard
            assert instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records == []
            assert len(instance.get_records_for_run(dagster_run, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records) == 6
        # Another process (the webserver's, the daemon's) opens the instance from its dagster.yaml and reads them.
        script = (
            "import json, dagster as dg\n"
            "with dg.DagsterInstance.get() as instance:\n"
            "    records = instance.fetch_materializations(dg.AssetKey('shipped'), limit=100).records\n"
            "    print(json.dumps([[r.run_id, r.asset_materialization.partition,"
            " r.asset_materialization.metadata['transfer_id'].value] for r in records]))\n"
        )
        out = subprocess.run([sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True,
                             check=True, timeout=120).stdout
        got = [tuple(r) for r in json.loads(out) if r[0] == run_id]
        expected_ids = ["", 'quote " and \\ backslash', "ü ✓ 😀", "\n\t\x00", '"@@incsync-slot-3@@"', None]
        assert got == list(reversed([(run_id, k, t) for k, t in zip(KEYS, expected_ids, strict=True)]))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_expand_events_rewrites_compact_rows_as_json_for_dagster_own_event_log(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from incsync.operations.dagster_compat.compact import expand_stored_events

    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    with _compact_instance(kind, tmp_path) as (instance, _home, _env):
        run_id, texts, _ = _stored(instance, fast=True)
        seen: list[int] = []
        assert expand_stored_events(instance.event_log_storage, batch=4, progress=seen.append) == len(KEYS)
        assert seen == [4, 6]
        storage = instance.event_log_storage
        raw = "SELECT event FROM event_logs WHERE run_id = :run AND dagster_event_type = 'ASSET_MATERIALIZATION' ORDER BY id"
        with storage.index_transaction() as conn:
            assert [e for (e,) in conn.execute(sa.text(raw), {"run": run_id})] == texts
        assert expand_stored_events(instance.event_log_storage) == 0  # nothing left: run again, it does nothing

"""Runs covering several (window, recipient) partitions: one coalesced transfer per recipient, exact
metadata per partition, committed batches kept when a later one fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

import incsync.operations.reporting
from incsync.config.load import load_config
from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG, DEFER_ASSET_EVENTS_TAG
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.operations.statuses import TransferStatus, list_transfers
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]


def _run_range(defs: dg.Definitions, instance: dg.DagsterInstance, first: dg.MultiPartitionKey, last: dg.MultiPartitionKey):
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance,
        asset_selection=[MODEL],
        tags={ASSET_PARTITION_RANGE_START_TAG: str(first), ASSET_PARTITION_RANGE_END_TAG: str(last)},
        raise_on_error=False,
    )


def _metadata_by_partition(instance: dg.DagsterInstance) -> dict[str, dict[str, object]]:
    out = {}
    for record in instance.fetch_materializations(MODEL, limit=100).records:
        mat = record.asset_materialization
        out[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    return out


def test_one_run_over_two_windows_and_two_recipients_records_each_transfer_exactly(spark, tmp_path: Path, instance):
    write_table(
        tmp_path / "src", "orders",
        [
            order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(1, 11)), order(3, "org_1", ts(2, 12)),
            order(4, "org_2", ts(1, 9)), order(5, "org_2", ts(2, 8)), order(6, "org_2", ts(2, 9)), order(7, "org_2", ts(2, 10)),
        ],
    )
    defs = build_definitions(lake_config(tmp_path, recipients=RECIPIENTS))
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])

    result = _run_range(defs, instance, partition_key("2024-01-01", "acme"), partition_key("2024-01-02", "globex"))

    assert result.success
    metadata = _metadata_by_partition(instance)
    assert sorted(metadata) == ["acme|2024-01-01", "acme|2024-01-02", "globex|2024-01-01", "globex|2024-01-02"]
    got = {k: (m["rows_transferred"], m["delta_rows_transferred"], m.get("recipient"), m.get("window_start")) for k, m in metadata.items()}
    assert got == {  # each window its own counts; the commit's record (recipient, window, ...) on its last window
        "acme|2024-01-01": (2, 2, None, None),
        "acme|2024-01-02": (1, 1, "acme", ts(2).timestamp()),
        "globex|2024-01-01": (1, 1, None, None),
        "globex|2024-01-02": (3, 3, "globex", ts(2).timestamp()),
    }
    assert metadata["globex|2024-01-02"]["high_watermark_epoch_seconds"] == int(ts(2, 10).timestamp())
    # One read per recipient over both windows (coalesced), each window with its own exact counts.
    ids = {k: m["transfer_id"] for k, m in metadata.items()}
    assert ids["acme|2024-01-01"] == ids["acme|2024-01-02"] != ids["globex|2024-01-01"] == ids["globex|2024-01-02"]
    assert metadata["acme|2024-01-02"]["transfer_windows"] == metadata["globex|2024-01-02"]["transfer_windows"] == 2
    assert metadata["acme|2024-01-01"]["transfer_record"].endswith("partition=acme%7C2024-01-02")
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2, 3]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "globex" / "orders")] == [4, 5, 6, 7]
    config = load_config(tmp_path / "incsync.yaml")
    [transfer] = list_transfers(instance, config, recipient="globex")
    assert (transfer.status, transfer.recipients, transfer.partitions_committed, transfer.rows_transferred) == (
        TransferStatus.SUCCESS, ("acme", "globex"), 4, 7
    )


def _bad_second_window(tmp_path: Path, instance: dg.DagsterInstance) -> tuple[list[dict], Path, dg.Definitions]:
    """acme's rows over three days, the second day's key twice; one window per commit, so the bad
    second window leaves the first committed."""
    rows = [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(2, 10)), order(2, "org_1", ts(2, 11)), order(3, "org_1", ts(3, 10))]
    write_table(tmp_path / "src", "orders", rows)
    config_file = lake_config(tmp_path, recipients=RECIPIENTS[:1], model={"max_rows_per_batch": 1})
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
    return rows, config_file, build_definitions(config_file)


def test_a_failed_window_keeps_the_committed_ones_and_a_backfill_resumes_at_it(spark, tmp_path: Path, instance):
    rows, config_file, defs = _bad_second_window(tmp_path, instance)

    failed = _run_range(defs, instance, partition_key("2024-01-01", "acme"), partition_key("2024-01-03", "acme"))

    assert not failed.success
    assert instance.get_materialized_partitions(MODEL) == {"acme|2024-01-01"}
    assert _metadata_by_partition(instance)["acme|2024-01-01"]["rows_transferred"] == 1
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1]
    [transfer] = list_transfers(instance, load_config(config_file))
    assert (transfer.status, transfer.recipients, transfer.partitions_committed) == (TransferStatus.PARTIAL_FAILURE, ("acme",), 1)

    # What a backfill retried from failure requests: the failed window and the ones after it.
    write_table(tmp_path / "src", "orders", [rows[0], rows[2], rows[3]])
    retried = _run_range(defs, instance, partition_key("2024-01-02", "acme"), partition_key("2024-01-03", "acme"))
    assert retried.success
    assert instance.get_materialized_partitions(MODEL) == {"acme|2024-01-01", "acme|2024-01-02", "acme|2024-01-03"}
    assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [
        (1, ts(1, 10)), (2, ts(2, 11)), (3, ts(3, 10))
    ]


def _run_model_job(defs: dg.Definitions, instance: dg.DagsterInstance, first: dg.MultiPartitionKey, last: dg.MultiPartitionKey):
    """A run of the model's job, as schedules, the sensor, the CLI and job-page backfills launch it."""
    return defs.resolve_job_def("orders").execute_in_process(
        instance=instance,
        asset_selection=[MODEL],
        tags={ASSET_PARTITION_RANGE_START_TAG: str(first), ASSET_PARTITION_RANGE_END_TAG: str(last)},
        raise_on_error=False,
    )


def _assert_materialized_as_committed(story: list[tuple[str, str]], keys: list[str]) -> None:
    """Each key materialized exactly once, after its window's commit line, before its step succeeded."""
    assert sorted(k for what, k in story if what == "materialized") == keys
    end = story.index(("STEP_SUCCESS", ""))
    for key in keys:
        at = story.index(("materialized", key))
        assert story.index(("committed", key.split("|")[1])) < at < end, (key, story)


def _run_events(instance: dg.DagsterInstance, run_id: str) -> list[Any]:
    """The run's events in the order they were stored: its log (the run's shard) and its materializations (on
    incsync's SQLite event log stored in the index shard only), merged by time, the log first on a tie."""
    logged = [(r.event_log_entry.timestamp, 0, i, r.event_log_entry)
              for i, r in enumerate(instance.get_records_for_run(run_id, limit=None).records)
              if r.event_log_entry.dagster_event_type != dg.DagsterEventType.ASSET_MATERIALIZATION]
    materialized = [(r.event_log_entry.timestamp, 1, r.storage_id, r.event_log_entry)
                    for r in instance.fetch_materializations(MODEL, limit=10_000, ascending=True).records
                    if r.event_log_entry.run_id == run_id]
    return [entry for *_, entry in sorted(logged + materialized, key=lambda e: e[:3])]


def _event_story(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str]]:
    """The run's events in storage order: planned and materialized partitions, commits, step ends."""
    story = []
    for entry in _run_events(instance, run_id):
        kind = entry.dagster_event_type
        if kind == dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED:
            story.append(("planned", entry.dagster_event.asset_materialization_planned_data.partition))
        elif kind == dg.DagsterEventType.ASSET_MATERIALIZATION:
            story.append(("materialized", entry.asset_materialization.partition))
        elif kind in (dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
            story.append((kind.value, ""))
        elif kind is None and " committed " in entry.user_message:  # one line per commit of a report
            story += [("committed", line.split(" from window ")[1].split(" ")[0])
                      for line in entry.user_message.splitlines() if " from window " in line]
    planned = [i for i, (what, _) in enumerate(story) if what == "planned"]
    if planned:  # one batch, in the order Dagster lists the run's partitions
        story[planned[0] : planned[-1] + 1] = [("planned", key) for key in sorted(story[i][1] for i in planned)]
    return story


def _three_commits(tmp_path: Path, instance: dg.DagsterInstance, monkeypatch, *, in_progress_after: float) -> tuple[str, list[str]]:  # noqa: ANN001
    """A model's job over three windows of acme, a commit each; every commit reported at once (not
    once a second). The run's id and its partition keys."""
    monkeypatch.setattr(incsync.operations.reporting, "REPORT_INTERVAL_SECONDS", 0)
    monkeypatch.setattr(incsync.operations.reporting, "IN_PROGRESS_AFTER_SECONDS", in_progress_after)
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 10)), order(2, "org_1", ts(2, 10)), order(3, "org_1", ts(3, 10))])
    config_file = lake_config(tmp_path, recipients=RECIPIENTS[:1], model={"max_rows_per_batch": 1})  # a commit per window
    defs = build_definitions(config_file)
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
    result = _run_model_job(defs, instance, partition_key("2024-01-01", "acme"), partition_key("2024-01-03", "acme"))
    assert result.success
    return result.run_id, ["acme|2024-01-01", "acme|2024-01-02", "acme|2024-01-03"]


def test_a_model_jobs_run_stores_one_event_per_partition_each_materialized_as_its_commit_lands(spark, tmp_path: Path, instance, monkeypatch):
    run_id, keys = _three_commits(tmp_path, instance, monkeypatch, in_progress_after=3600)  # however loaded the machine: none is slow

    assert instance.get_run_by_id(run_id).tags[DEFER_ASSET_EVENTS_TAG] == "true"
    # Nothing planned (no span was slow, none failed); each window materialized once, after its
    # commit landed and before the step ended (by the run's reporter thread), none again at the end.
    story = _event_story(instance, run_id)
    assert [e for e in story if e[0] != "materialized"] == [
        ("STEP_START", ""),
        ("committed", "2024-01-01"), ("committed", "2024-01-02"), ("committed", "2024-01-03"),
        ("STEP_SUCCESS", ""),
        ("STEP_START", ""), ("STEP_SUCCESS", ""),  # the model's integrity check (manual: it yields nothing)
    ]
    _assert_materialized_as_committed(story, keys)
    assert {k: md["rows_transferred"] for k, md in _metadata_by_partition(instance).items()} == dict.fromkeys(keys, 1)
    # The bookkeeping's budget (issue 29): one stored event per partition, nothing else names one.
    per_partition = [e.dagster_event.partition for e in _run_events(instance, run_id) if e.is_dagster_event and e.dagster_event.partition]
    assert sorted(per_partition) == keys


def test_a_model_jobs_slow_span_shows_its_windows_in_progress_until_they_land(spark, tmp_path: Path, instance, monkeypatch):
    run_id, keys = _three_commits(tmp_path, instance, monkeypatch, in_progress_after=0)  # every span counts as slow

    # The span's windows are planned as its work starts (what the UI shows as materializing), each
    # materialized after its commit landed; none is left planned without its materialization.
    story = _event_story(instance, run_id)
    assert [e for e in story if e[0] != "materialized"] == [
        ("STEP_START", ""),
        *[("planned", key) for key in keys],
        ("committed", "2024-01-01"), ("committed", "2024-01-02"), ("committed", "2024-01-03"),
        ("STEP_SUCCESS", ""),
        ("STEP_START", ""), ("STEP_SUCCESS", ""),
    ]
    _assert_materialized_as_committed(story, keys)
    assert instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(MODEL) == {}


def test_a_model_jobs_failed_run_shows_its_uncommitted_partitions_failed(spark, tmp_path: Path, instance):
    _rows, config_file, defs = _bad_second_window(tmp_path, instance)

    failed = _run_model_job(defs, instance, partition_key("2024-01-01", "acme"), partition_key("2024-01-03", "acme"))

    assert not failed.success
    assert instance.get_materialized_partitions(MODEL) == {"acme|2024-01-01"}
    # What the UI reads for a partition's failed status: planned in a run that did not materialize it.
    attempts = instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(MODEL)
    assert {key: run_id for key, (run_id, _event_id) in attempts.items()} == {
        "acme|2024-01-02": failed.run_id, "acme|2024-01-03": failed.run_id,
    }
    [transfer] = list_transfers(instance, load_config(config_file))
    assert (transfer.status, transfer.partitions_committed) == (TransferStatus.PARTIAL_FAILURE, 1)

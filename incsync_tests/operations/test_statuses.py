"""Transfer statuses derived from real Dagster run records and the events that move them."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, JobFailureData, RunFailureReason
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.dagster_run import DagsterRun
from dagster._daemon.monitoring.run_monitoring import monitor_starting_run

from incsync.config.errors import TagError
from incsync.config.load import load_config
from incsync.config.tags import parse_tags
from incsync.operations.errors import StatusError
from incsync.operations.partitions import RECIPIENTS_PARTITIONS
from incsync.operations.statuses import TransferStatus, counts_by_model, list_transfers
from incsync_tests.support.lake import lake_config

ASSET = dg.AssetKey(["lake", "orders"])
RECIPIENTS = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta", "tags": {"tier": "gold"}},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
]


@pytest.fixture
def monitored(tmp_path: Path):
    home = tmp_path / "monitored_home"
    home.mkdir()
    # A zero start timeout: the monitor's first look finds a run that never started past it, without waiting.
    overrides = {"run_monitoring": {"enabled": True, "start_timeout_seconds": 0}}
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as inst:
        inst.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex"])
        yield inst


ORIGIN = RemoteJobOrigin(
    repository_origin=RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("incsync"), "__repository__"),
    job_name="__ASSET_JOB",
)


def _queued(instance: dg.DagsterInstance, recipient: str, *, status=dg.DagsterRunStatus.QUEUED, tags=None) -> DagsterRun:
    run = DagsterRun(
        job_name="__ASSET_JOB",
        remote_job_origin=ORIGIN,
        run_id=str(uuid.uuid4()),
        status=status,
        asset_selection=frozenset({ASSET}),
        tags={"incsync/recipient": recipient, "incsync/model": "orders", **(tags or {})},
    )
    return instance.add_run(run)


def _start(instance: dg.DagsterInstance, run: DagsterRun) -> DagsterRun:
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name), run_id=run.run_id)
    return instance.get_run_by_id(run.run_id)


def _status(instance, config, run: DagsterRun, **kw) -> TransferStatus:
    [transfer] = [t for t in list_transfers(instance, config, **kw) if t.run_id == run.run_id]
    return transfer.status


def test_each_run_state_maps_to_its_transfer_status(tmp_path: Path, monitored):
    config = load_config(lake_config(tmp_path, recipients=RECIPIENTS))
    instance = monitored

    pending = _queued(instance, "acme")
    assert _status(instance, config, pending) == TransferStatus.PENDING
    created = instance.get_run_record_by_id(pending.run_id).create_timestamp
    assert _status(instance, config, pending, now=created + timedelta(hours=6, seconds=1)) == TransferStatus.EXPIRED
    assert _status(instance, config, pending, now=created + timedelta(hours=5, minutes=59)) == TransferStatus.PENDING

    cancelled = _queued(instance, "acme")
    instance.report_run_canceled(cancelled)  # what the UI's "terminate" does to a queued run
    assert _status(instance, config, cancelled) == TransferStatus.CANCELLED

    killed = _start(instance, _queued(instance, "acme"))
    assert _status(instance, config, killed) == TransferStatus.RUNNING
    instance.report_run_canceling(killed)
    instance.report_run_canceled(killed)
    assert _status(instance, config, killed) == TransferStatus.KILLED

    succeeded = _start(instance, _queued(instance, "globex"))
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=succeeded.job_name), run_id=succeeded.run_id)
    assert _status(instance, config, succeeded) == TransferStatus.SUCCESS

    failed = _start(instance, _queued(instance, "globex"))
    instance.report_run_failed(failed, "step failed", JobFailureData(error=None, failure_reason=RunFailureReason.STEP_FAILURE))
    assert _status(instance, config, failed) == TransferStatus.ERROR

    lost = _start(instance, _queued(instance, "globex"))
    instance.report_run_failed(lost, "Detected run worker status WorkerStatus.FAILED. Marking run as failed.")
    assert _status(instance, config, lost) == TransferStatus.ORPHANED

    never_started = _queued(instance, "globex", status=dg.DagsterRunStatus.NOT_STARTED)
    monitor_starting_run(instance, instance.get_run_record_by_id(never_started.run_id), logging.getLogger("test"))
    assert instance.get_run_by_id(never_started.run_id).status == dg.DagsterRunStatus.FAILURE
    assert _status(instance, config, never_started) == TransferStatus.ORPHANED

    counts = counts_by_model(list_transfers(instance, config))
    assert dict(counts["orders"]) == {
        "PENDING": 1, "CANCELLED": 1, "KILLED": 1, "SUCCESS": 1, "ERROR": 1, "ORPHANED": 2,
    }


def test_transfers_filter_by_recipient_status_and_tags(tmp_path: Path, monitored):
    config = load_config(lake_config(tmp_path, recipients=RECIPIENTS))
    instance = monitored
    gold = _queued(instance, "acme", tags={"incsync/tag/tier": "gold"})
    _queued(instance, "globex")
    done = _start(instance, _queued(instance, "globex"))
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=done.job_name), run_id=done.run_id)

    assert [t.run_id for t in list_transfers(instance, config, tags={"tier": "gold"})] == [gold.run_id]
    assert [t.tags for t in list_transfers(instance, config, tags={"tier": "gold"})] == [{"tier": "gold"}]
    assert [t.recipients for t in list_transfers(instance, config, recipient="globex")] == [("globex",), ("globex",)]
    assert [t.run_id for t in list_transfers(instance, config, status="success")] == [done.run_id]
    assert list_transfers(instance, config, tags={"tier": "silver"}) == []

    with pytest.raises(TagError) as bad_tag:
        list_transfers(instance, config, tags={"tier": "gold plated"})
    assert str(bad_tag.value) == (
        'tag tier=gold plated: value "gold plated" is invalid; tag keys and values must match '
        "^[A-Za-z0-9_-]+$ (letters, digits, _ and - only)"
    )
    with pytest.raises(TagError, match=r'^tag "tier" must be written key=value \(e.g. --tag tier=gold\)$'):
        parse_tags(["tier"])
    with pytest.raises(StatusError) as bad_status:
        list_transfers(instance, config, status="DONE")
    assert str(bad_status.value) == (
        'unknown transfer status "DONE"; use one of PENDING, RUNNING, SUCCESS, ERROR, PARTIAL_FAILURE, '
        "CANCELLED, KILLED, EXPIRED, ORPHANED"
    )

"""The destination lease: two transfers of the same (model, destination) at once publish at most once."""

from __future__ import annotations

import threading
from pathlib import Path

from incsync.config.load import load_config
from incsync.destinations.base import TransferRecord
from incsync.destinations.delta.destination import DeltaDestination
from incsync.errors import LeaseError
from incsync.sources.registry import build_source
from incsync.transfer.execute import run_transfer
from incsync.transfer.request import TransferOutcome, TransferRequest, TransferRun
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

RECIPIENTS = [{"id": "acme", "id_in_provider_system": "org_1", "destination": "shared"}]


class GatedDelta(DeltaDestination):
    """The real Delta destination; a transfer that read its state waits at ``gate`` before going on."""

    def __init__(self, config, gate: threading.Barrier | threading.Event):
        super().__init__(config)
        self.gate = gate
        self.has_read = threading.Event()

    def read_state(self, *, model, recipient):
        state = super().read_state(model=model, recipient=recipient)
        self.has_read.set()
        self.gate.wait()
        return state


def _setup(tmp_path: Path):
    write_table(
        tmp_path / "src", "orders",
        [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))],
    )
    path = lake_config(tmp_path, recipients=RECIPIENTS, destinations=[{"name": "shared", "kind": "delta", "path": "./out/shared"}])
    return load_config(path)


def _request(config, recipient_id: str, destination, spark) -> TransferRequest:
    model = config.models[0]
    return TransferRun.for_model(
        config, model, source=build_source(config.source("lake")), spark=lambda: spark,
    ).request(config.recipient(recipient_id), destination, "2024-01-01")


def _history_records(table: Path) -> list[str]:
    from deltalake import DeltaTable

    from incsync.destinations.delta.state import RECORD_KEY

    return [c[RECORD_KEY] for c in DeltaTable(str(table)).history() if RECORD_KEY in c]


def test_two_transfers_of_one_model_destination_at_once_publish_once(spark, tmp_path: Path):
    config = _setup(tmp_path)
    # First transfer creates the table, so both racers below merge into an existing one.
    run_transfer(_request(config, "acme", DeltaDestination(config.destination("shared")), spark), staging_root=tmp_path / "stg")
    write_table(
        tmp_path / "src", "orders",
        [order(1, "org_1", ts(1, 5), status="paid"), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))],
    )
    barrier = threading.Barrier(2, timeout=60)
    outcomes: list[TransferOutcome] = []
    errors: list[BaseException] = []

    def racer() -> None:
        request = _request(config, "acme", GatedDelta(config.destination("shared"), barrier), spark)
        try:
            outcomes.append(run_transfer(request, staging_root=tmp_path / "stg"))
        except LeaseError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=racer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)

    assert len(outcomes) == 1 and len(errors) == 1
    assert "model orders, recipient acme: transfer " in str(errors[0])
    assert str(errors[0]).endswith("nothing was published. Re-run the window.")
    table = tmp_path / "out" / "shared" / "orders"
    assert [(r["id"], r["status"]) for r in delta_rows(table)] == [(1, "paid"), (2, "new")]
    records = _history_records(table)
    assert len(records) == 2 and outcomes[0].record.transfer_id in records[0]
    assert outcomes[0].record.delta_rows_transferred == 1


def test_a_stale_writer_cannot_publish_over_a_newer_transfer(spark, tmp_path: Path):
    config = _setup(tmp_path)
    stalled = threading.Event()
    zombie_destination = GatedDelta(config.destination("shared"), stalled)
    zombie_result: list[BaseException | TransferOutcome] = []

    def zombie() -> None:
        try:
            zombie_result.append(run_transfer(_request(config, "acme", zombie_destination, spark), staging_root=tmp_path / "z"))
        except LeaseError as exc:
            zombie_result.append(exc)

    # The zombie reads its state (no table yet) and stalls; a newer transfer commits meanwhile.
    thread = threading.Thread(target=zombie)
    thread.start()
    assert zombie_destination.has_read.wait(60)
    newer = run_transfer(_request(config, "acme", DeltaDestination(config.destination("shared")), spark), staging_root=tmp_path / "n")
    stalled.set()
    thread.join(timeout=180)

    assert isinstance(zombie_result[0], LeaseError)
    assert str(zombie_result[0]) == (
        f"model orders, recipient acme: transfer {newer.record.transfer_id} committed to "
        f"{tmp_path / 'out' / 'shared' / 'orders'} after this transfer read None; nothing was published. Re-run the window."
    )
    assert len(_history_records(tmp_path / "out" / "shared" / "orders")) == 1


def test_a_commit_that_is_not_a_transfer_meanwhile_does_not_block_a_publish(spark, tmp_path: Path):
    """Maintenance commits (OPTIMIZE, VACUUM, another tool's no-op) carry no transfer record: not a lease holder."""
    from deltalake import DeltaTable

    config = _setup(tmp_path)
    table = tmp_path / "out" / "shared" / "orders"
    first = run_transfer(_request(config, "acme", DeltaDestination(config.destination("shared")), spark), staging_root=tmp_path / "s")
    gate = threading.Event()
    acme_destination = GatedDelta(config.destination("shared"), gate)
    result: list[object] = []
    thread = threading.Thread(
        target=lambda: result.append(run_transfer(_request(config, "acme", acme_destination, spark), staging_root=tmp_path / "a"))
    )
    thread.start()
    assert acme_destination.has_read.wait(60)
    dt = DeltaTable(str(table))
    dt.create_write_transaction([], mode="append", schema=dt.schema())  # a commit without an incsync record
    gate.set()
    thread.join(timeout=180)
    assert isinstance(result[0], TransferOutcome)
    assert [(r["id"], r["organization_id"]) for r in delta_rows(table)] == [(1, "org_1"), (2, "org_1")]
    records = [TransferRecord.from_json(r) for r in _history_records(table)]
    assert [r.transfer_id for r in records] == [result[0].record.transfer_id, first.record.transfer_id]
    assert DeltaTable(str(table)).version() == 3  # owner stamp, first transfer, the foreign commit, the second transfer

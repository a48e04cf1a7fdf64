"""Conformance: what every destination kind does with a transfer — backfill, incremental, the
last-modified tie-break, no-op re-runs, full refresh (and a recipient's view through it), ownership.

Transfers run without Spark (``incsync_tests.support.arrow_transfer``) against the real engines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from incsync.errors import OwnershipError
from incsync_tests.destinations.conformance.kinds import BY_NAME, KINDS, KINDS_TABLE, create_view, kinds_with, named, view_rows
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

LOOKBACK = 60
ACME = [{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}]
SOURCE = [
    order(1, "org_1", ts(1, 1)),
    order(2, "org_1", ts(1, 2)),
    order(3, "org_2", ts(1, 3)),
    order(4, "org_1", ts(2, 10), amount=4.0),
    order(5, "org_2", ts(2, 11)),
]


def _env(kind: str, monkeypatch: pytest.MonkeyPatch):
    return destination_env(kind, monkeypatch)


def _configure(root: Path, kind: str, rows: list[dict[str, Any]]) -> Path:
    write_table(root / "src", "orders", rows)
    return lake_config(root, recipients=ACME, destinations=[destination_spec(kind)], model={"lookback_seconds": LOOKBACK})


def _org1(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r["organization_id"] == "org_1"), key=lambda r: r["id"])


def test_every_kind_declares_its_capabilities() -> None:
    from incsync_tests.support.destinations import KINDS as EVERY_KIND

    assert KINDS == EVERY_KIND  # the per-kind tests outside the suite run over the same kinds
    for kind in KINDS_TABLE:
        for capability in ("upserts", "recipient_views"):
            reason = getattr(kind, capability)
            assert reason is None or len(reason) > 20, f"{kind.name}.{capability}: say why it is not supported"
        assert kind.owner_where and kind.crash_points, kind.name
        assert any(committed for _, committed in kind.crash_points) and any(not c for _, c in kind.crash_points)


@pytest.mark.parametrize("kind", KINDS)
def test_backfill_incremental_tie_break_and_no_op_rerun(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _env(kind, monkeypatch):
        config = _configure(tmp_path, kind, SOURCE)
        target = Target(config)
        first = run(config, "2024-01-01", scheduled=False)
        second = run(config, "2024-01-02", scheduled=False)
        assert (first.record.rows_transferred, first.record.delta_rows_transferred) == (2, 2)
        assert (second.record.rows_transferred, second.record.delta_rows_transferred) == (1, 1)
        assert target.rows() == _org1(SOURCE)
        assert target.high_watermark() == ts(2, 10)
        assert target.state().last_transfer == second.record

        changed = [*SOURCE, order(6, "org_1", ts(2, 20)), order(7, "org_2", ts(2, 20))]
        changed[1] = order(2, "org_1", ts(2, 21), status="paid", amount=2.5)
        write_table(tmp_path / "src", "orders", changed)
        incremental = run(config, "2024-01-02", scheduled=True)
        assert incremental.bounds.lower == ts(2, 9, 59)  # floor(HW) - lookback
        assert (incremental.record.rows_transferred, incremental.record.delta_rows_transferred) == (3, 2)  # 4 again, 6, 2
        assert incremental.record.transfer_type == "INCREMENTAL"
        assert target.rows() == _org1(changed)
        assert target.high_watermark() == ts(2, 21)

        # A lagging source replays an old version of row 2: newer data is never overwritten, the HW never moves back.
        stale = [*changed]
        stale[1] = order(2, "org_1", ts(1, 2))
        write_table(tmp_path / "src", "orders", stale)
        run(config, "2024-01-01", scheduled=False)
        assert target.rows() == _org1(changed)
        assert target.high_watermark() == ts(2, 21)

        # Re-running a window whose rows the destination holds changes nothing a reader sees (upserts).
        write_table(tmp_path / "src", "orders", changed)
        before = target.raw_rows()
        again = run(config, "2024-01-02", scheduled=False)
        assert target.state().last_transfer == again.record
        assert target.high_watermark() == ts(2, 21)
        assert target.rows() == _org1(changed)
        if BY_NAME[kind].upserts is None:
            assert target.raw_rows() == before


@pytest.mark.parametrize("kind", kinds_with("upserts"))
def test_an_equal_last_modified_replaces_the_row(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tie-break keeps rows whose last-modified is newer, and takes the batch's on a tie (a correction)."""
    with _env(kind, monkeypatch):
        config = _configure(tmp_path, kind, SOURCE)
        target = Target(config)
        run(config, "2024-01-02", scheduled=False)
        corrected = [*SOURCE]
        corrected[3] = order(4, "org_1", ts(2, 10), status="fixed", amount=40.0)
        write_table(tmp_path / "src", "orders", corrected)
        run(config, "2024-01-02", scheduled=False)
        assert target.raw_rows() == [r for r in _org1(corrected) if r["id"] == 4]


@pytest.mark.parametrize("kind", KINDS)
def test_full_refresh_replaces_the_rows_in_one_commit(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _env(kind, monkeypatch):
        config = _configure(tmp_path, kind, SOURCE)
        target = Target(config)
        for window in ("2024-01-01", "2024-01-02"):
            run(config, window, scheduled=False)

        current = [r for r in SOURCE if r["id"] != 2]  # deleted at the source: only a full refresh removes it
        write_table(tmp_path / "src", "orders", current)
        refresh = run(config, "2024-01-02", scheduled=False, full_refresh=True)
        assert (refresh.record.transfer_type, refresh.record.extra["full_refresh_reason"]) == ("FULL_REFRESH", "requested")
        assert refresh.bounds.lower == ts(1)
        assert refresh.record.rows_transferred == 2
        assert target.raw_rows() == _org1(current)
        assert target.state().last_transfer == refresh.record
        assert target.high_watermark() == ts(2, 10)
        assert run(config, "2024-01-02", scheduled=True).record.transfer_type == "INCREMENTAL"
        assert target.rows() == _org1(current)


@pytest.mark.parametrize("kind", kinds_with("recipient_views"))
def test_a_recipients_view_survives_a_full_refresh(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _env(kind, monkeypatch):
        rows = [*SOURCE, order(6, "org_1", ts(1, 6), status="paid")]
        config = _configure(tmp_path, kind, rows)
        target = Target(config)
        run(config, "2024-01-01", scheduled=False)
        create_view(target)
        assert view_rows(target) == [(6, "paid")]

        rows = [*rows[:1], order(2, "org_1", ts(1, 7), status="paid"), *rows[2:5]]  # 6 gone, 2 paid now
        write_table(tmp_path / "src", "orders", rows)
        run(config, "2024-01-01", scheduled=False, full_refresh=True)
        assert view_rows(target) == [(2, "paid")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_recipient_on_the_same_copy_is_refused(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two config files point at one copy (folder, schema or file); the second recipient's publish fails first."""
    with _env(kind, monkeypatch):
        write_table(tmp_path / "src", "orders", SOURCE)
        # Object-storage keys are per recipient id, so the dangerous slip there is the same id with another tenant.
        intruder = "acme" if kind == "object_storage" else "globex"
        configs = []
        for recipient, tenant, name in (("acme", "org_1", "a.yaml"), (intruder, "org_2", "b.yaml")):
            path = lake_config(tmp_path, recipients=[{"id": recipient, "id_in_provider_system": tenant, "destination": "dest"}],
                               destinations=[destination_spec(kind, name="dest", folder="./out/shared")])
            configs.append(path.rename(tmp_path / name))
        outcome = run(configs[0], "2024-01-01", scheduled=False)
        assert outcome.destination_metadata["destination_owner"] == "acme"
        with pytest.raises(OwnershipError) as info:
            run(configs[1], "2024-01-01", scheduled=False, recipient_id=intruder)
        where = named(BY_NAME[kind].owner_where, kind, tmp_path.resolve() / "out" / "shared")
        assert str(info.value) == (
            f"model orders: {where} belongs to recipient acme (tenant org_1); refusing to publish "
            f"recipient {intruder} (tenant org_2) there, nothing was written. Give recipient {intruder} a destination of "
            f"its own; if this copy really moves to it, run `incsync transfer-ownership orders --to {intruder}` first."
        )
        target = Target(configs[0])
        assert sorted(r["id"] for r in target.raw_rows()) == [1, 2]
        assert target.state().last_transfer == outcome.record



@pytest.mark.parametrize("kind", KINDS)
def test_a_polling_reader_sees_a_full_refresh_whole_or_not_at_all(kind: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    versions = [
        [order(i, "org_1", ts(1, 1), status="a") for i in range(1, 41)],
        [order(i, "org_1", ts(1, 2), status="b") for i in range(21, 61)],  # 20 keys gone, 20 new, 20 changed
    ]
    with _env(kind, monkeypatch):
        config = _configure(tmp_path, kind, versions[0])
        run(config, "2024-01-01", scheduled=False, full_refresh=True)
        target = Target(config)
        whole = [sorted((r["id"], r["status"]) for r in rows) for rows in versions]
        seen: list[list[tuple]] = []
        errors: list[BaseException] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                try:
                    seen.append(sorted((r["id"], r["status"]) for r in target.raw_rows()))
                except Exception as error:  # noqa: BLE001 - reported by the assertion below
                    errors.append(error)

        reader = threading.Thread(target=poll, daemon=True)
        reader.start()
        try:
            for k in (1, 0, 1):
                write_table(tmp_path / "src", "orders", versions[k])
                run(config, "2024-01-01", scheduled=False, full_refresh=True)
        finally:
            done.set()
            reader.join(timeout=30)
        assert errors == []
        assert seen and all(snapshot in whole for snapshot in seen), [s for s in seen if s not in whole][:1]
        assert target.raw_rows() == sorted(versions[1], key=lambda r: r["id"])

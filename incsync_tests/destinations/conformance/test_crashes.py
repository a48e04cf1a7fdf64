"""Conformance: a transfer SIGKILLed at each crash point (``incsync.core.crashpoints``) leaves every destination
kind all-or-nothing — before its commit point readers see the old rows and state, after it the new —
and the next run completes it; a full refresh killed mid-publish keeps the old data.

Each kind's crash points and which of them fall after its commit point are its row of ``kinds.KINDS_TABLE``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from incsync.core.crashpoints import CRASH_ENV
from incsync_tests.destinations.conformance.kinds import BY_NAME, KINDS, KINDS_TABLE
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target, destination_env, destination_spec, duplicates, max_last_modified
from incsync_tests.support.lake import lake_config, order, ts, write_table

REPO = Path(__file__).resolve().parents[3]
LOOKBACK = 60
STAGING_RE = re.compile(r"orders-acme-\d{8}T\d{6}Z-[0-9a-f]{12}")

DAY1 = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))]
DAY2 = [
    order(1, "org_1", ts(2, 5), status="paid", amount=9.5),
    order(2, "org_1", ts(1, 2)),
    order(3, "org_2", ts(1, 3)),
    order(4, "org_1", ts(2, 6)),
    order(5, "org_2", ts(2, 7)),
]
CASES = [(k.name, point, committed) for k in KINDS_TABLE for point, committed in k.crash_points]


def _org1(rows):
    return sorted((r for r in rows if r["organization_id"] == "org_1"), key=lambda r: r["id"])


def _leftover_staging() -> list[str]:
    """Staging folders left in the staging root (their ``.lock`` files must not outlive them)."""
    root = Path(os.environ["INCSYNC_STAGING_DIR"])
    names = sorted(p.name for p in root.iterdir()) if root.exists() else []
    folders = [n for n in names if STAGING_RE.fullmatch(n)]
    assert set(names) <= {*folders, *(f"{n}.lock" for n in folders)}, names
    return folders


@pytest.mark.parametrize(("kind", "point", "committed"), CASES, ids=[f"{k}-{p}" for k, p, _ in CASES])
def test_kill_at_crash_point(kind: str, point: str, committed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        write_table(tmp_path / "src", "orders", DAY1)
        config = lake_config(
            tmp_path,
            recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
            destinations=[destination_spec(kind)],
            model={"lookback_seconds": LOOKBACK},
        )
        arrow_transfer.run(config, "2024-01-01", scheduled=False)
        target = Target(config)
        before_raw = target.raw_rows()
        assert target.rows() == _org1(DAY1)
        assert target.high_watermark() == ts(1, 2)

        write_table(tmp_path / "src", "orders", DAY2)
        proc = subprocess.run(
            [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(config), "2024-01-02", "--scheduled"],
            cwd=REPO, env={**os.environ, CRASH_ENV: point}, capture_output=True, text=True, timeout=180,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]

        # The HW lies in Jan 1, so the scheduled run reads from floor(HW) - lookback: row 2 again, and Jan 2's changes.
        crashed_read = [r for r in _org1(DAY2) if r["updated_at"] >= ts(1, 2) - timedelta(seconds=LOOKBACK)]
        raw = target.raw_rows()
        if not committed:
            assert raw == before_raw
        elif BY_NAME[kind].upserts:  # append-only: the crashed run's rows were added
            assert raw == sorted(before_raw + crashed_read, key=lambda r: (r["id"], str(r["updated_at"])))
        else:
            assert raw == _org1(DAY2)
        assert target.high_watermark() == max_last_modified(target.rows())
        assert len(_leftover_staging()) == 1

        hw_before_rerun = target.high_watermark()
        outcome = arrow_transfer.run(config, "2024-01-02", scheduled=True)
        assert _leftover_staging() == []
        assert target.rows() == _org1(DAY2)
        assert target.high_watermark() == ts(2, 6)
        # A scheduled run reads from floor(HW) - lookback: after the crash the HW still lies in Jan 1, so
        # row 2 (Jan 1, 02:00) is read again beside Jan 2's two changes.
        assert outcome.record.rows_transferred == (1 if committed else 3)
        if BY_NAME[kind].upserts:
            # Appends repeat only what the runs re-read: each run's rows at or after floor(HW) - lookback.
            repeated = duplicates(target.raw_rows())
            reread_from = hw_before_rerun.replace(microsecond=0) - timedelta(seconds=LOOKBACK)
            appended = [*_org1(DAY1), *(crashed_read if committed else []),
                        *(r for r in _org1(DAY2) if r["updated_at"] >= reread_from)]
            counts = Counter((r["id"], r["updated_at"]) for r in appended)
            expected = {key[0] for key, n in counts.items() if n > 1}
            assert {dict(k)["id"] for k in repeated} == {str(i) for i in expected}
            assert sum(repeated.values()) == sum(n - 1 for n in counts.values())


@pytest.mark.parametrize("kind", KINDS)
def test_kill_inside_a_full_refresh_keeps_the_old_data(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with destination_env(kind, monkeypatch):
        write_table(tmp_path / "src", "orders", DAY2)
        config = lake_config(
            tmp_path,
            recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
            destinations=[destination_spec(kind)],
            model={"lookback_seconds": LOOKBACK},
        )
        arrow_transfer.run(config, "2024-01-02", scheduled=False, full_refresh=True)
        target = Target(config)
        before_raw, before_state = target.raw_rows(), target.state()
        assert target.rows() == _org1(DAY2)

        current = [r for r in DAY2 if r["id"] != 2]
        write_table(tmp_path / "src", "orders", current)
        proc = subprocess.run(
            [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(config), "2024-01-02", "--full-refresh"],
            cwd=REPO, env={**os.environ, CRASH_ENV: "mid_publish"}, capture_output=True, text=True, timeout=180,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        assert target.raw_rows() == before_raw
        assert target.state() == before_state

        outcome = arrow_transfer.run(config, "2024-01-02", scheduled=False, full_refresh=True)
        assert outcome.record.transfer_type == "FULL_REFRESH"
        assert target.raw_rows() == _org1(current)
        assert _leftover_staging() == []

"""A transfer SIGKILLed at each crash point leaves every destination all-or-nothing, and the next run repairs it."""

from __future__ import annotations

import os
from collections import Counter
import re
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from incsync.core.crashpoints import CRASH_ENV
from incsync_tests import arrow_transfer
from incsync_tests.destination_support import Target, destination_env, destination_spec, duplicates, max_last_modified
from incsync_tests.support import lake_config, order, ts, write_table

REPO = Path(__file__).resolve().parents[2]
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
# Which crash points fall after the commit point (the transfer is visible) and which before it.
CASES = [
    ("delta", "after_staging", False),
    ("delta", "mid_publish", False),
    ("delta", "after_publish", True),
    ("postgres", "after_staging", False),
    ("postgres", "mid_publish", False),
    ("postgres", "after_publish", True),
    ("object_storage", "after_staging", False),
    ("object_storage", "mid_publish", False),
    ("object_storage", "after_manifest", True),
    ("object_storage", "after_publish", True),
]


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
            [sys.executable, "-m", "incsync_tests.arrow_transfer", str(config), "2024-01-02", "--scheduled"],
            cwd=REPO, env={**os.environ, CRASH_ENV: point}, capture_output=True, text=True, timeout=180,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]

        # The HW lies in Jan 1, so the scheduled run reads from floor(HW) - lookback: row 2 again, and Jan 2's changes.
        crashed_read = [r for r in _org1(DAY2) if r["updated_at"] >= ts(1, 2) - timedelta(seconds=LOOKBACK)]
        raw = target.raw_rows()
        if not committed:
            assert raw == before_raw
        elif kind == "object_storage":
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
        if kind == "object_storage":
            # Appends repeat only what the runs re-read: each run's rows at or after floor(HW) - lookback.
            repeated = duplicates(target.raw_rows())
            reread_from = hw_before_rerun.replace(microsecond=0) - timedelta(seconds=LOOKBACK)
            appended = [*_org1(DAY1), *(crashed_read if committed else []),
                        *(r for r in _org1(DAY2) if r["updated_at"] >= reread_from)]
            counts = Counter((r["id"], r["updated_at"]) for r in appended)
            expected = {key[0] for key, n in counts.items() if n > 1}
            assert {dict(k)["id"] for k in repeated} == {str(i) for i in expected}
            assert sum(repeated.values()) == sum(n - 1 for n in counts.values())


@pytest.mark.parametrize("kind", ["delta", "postgres", "object_storage"])
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
            [sys.executable, "-m", "incsync_tests.arrow_transfer", str(config), "2024-01-02", "--full-refresh"],
            cwd=REPO, env={**os.environ, CRASH_ENV: "mid_publish"}, capture_output=True, text=True, timeout=180,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        assert target.raw_rows() == before_raw
        assert target.state() == before_state

        outcome = arrow_transfer.run(config, "2024-01-02", scheduled=False, full_refresh=True)
        assert outcome.record.transfer_type == "FULL_REFRESH"
        assert target.raw_rows() == _org1(current)
        assert _leftover_staging() == []


def test_the_next_run_leaves_a_live_transfers_staging_alone(tmp_path: Path) -> None:
    from incsync.config.load import load_config
    from incsync.staging.folders import claim, remove_stale_staging

    config = load_config(lake_config(tmp_path, destinations=[destination_spec("object_storage", name="acme_delta")]))
    model, recipient = config.models[0], config.recipients[0]
    root = tmp_path / "stg"
    live, dead = root / "orders-acme-20240101T000000Z-aaaaaaaaaaaa", root / "orders-acme-20240101T000001Z-bbbbbbbbbbbb"
    other = root / "orders-acme2-20240101T000000Z-cccccccccccc"
    for folder in (dead, other):
        folder.mkdir(parents=True)
    with claim(live):
        live.mkdir()
        assert remove_stale_staging(root, model, recipient) == [dead]
        assert live.is_dir() and other.is_dir()
    assert sorted(p.name for p in root.iterdir()) == [other.name]

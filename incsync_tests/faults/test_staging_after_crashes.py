"""A transfer SIGKILLed at any moment leaves nothing in staging once the next transfer has run: its
folder, its slices and its lock file, even when it died before it made the folder (faults item 7)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from incsync.config.load import load_config
from incsync.core.crashpoints import CRASH_ENV
from incsync.staging.folders import claim, remove_stale_staging
from incsync.storage.locks import exclusive_lock, lock_if_free
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

REPO = Path(__file__).resolve().parents[2]
DAY1 = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3))]
DAY2 = [*DAY1, order(4, "org_1", ts(2, 6))]


def _staging() -> Path:
    return Path(os.environ["INCSYNC_STAGING_DIR"])


@pytest.mark.parametrize("kind", ["delta", "postgres", "object_storage"])
def test_a_transfer_killed_after_claiming_its_staging_leaves_nothing_after_recovery(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with destination_env(kind, monkeypatch):
        write_table(tmp_path / "src", "orders", DAY1)
        config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                             destinations=[destination_spec(kind)])
        arrow_transfer.run(config, "2024-01-01", scheduled=False)
        write_table(tmp_path / "src", "orders", DAY2)
        proc = subprocess.run(
            [sys.executable, "-m", "incsync_tests.support.arrow_transfer", str(config), "2024-01-02", "--scheduled"],
            cwd=REPO, env={**os.environ, CRASH_ENV: "after_claim"}, capture_output=True, text=True, timeout=180,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        [lock] = list(_staging().iterdir())  # it died holding its lock, before it made its folder
        assert lock.name.startswith("orders-acme-") and lock.name.endswith(".lock")

        arrow_transfer.run(config, "2024-01-02", scheduled=True)
        assert list(_staging().iterdir()) == []
        assert [r["id"] for r in Target(config).rows()] == [1, 2, 4]


def test_the_next_transfer_removes_dead_locks_and_fan_out_reads_and_spares_live_ones(tmp_path: Path) -> None:
    config = load_config(lake_config(tmp_path))
    model, recipient = config.models[0], config.recipients[0]
    root = tmp_path / "stg"
    root.mkdir()
    lock_only = root / "orders-acme-20240101T000000Z-aaaaaaaaaaaa.lock"
    fan_out = root / "orders-fanout-20240101T000000Z-bbbbbbbbbbbb"
    (fan_out / "__incsync_tenant=0").mkdir(parents=True)
    fan_out.with_name(f"{fan_out.name}.lock").touch()
    lock_only.touch()
    others = [root / "orders-globex-20240101T000000Z-cccccccccccc.lock", root / "invoices-fanout-20240101T000000Z-dddddddddddd"]
    others[0].touch()
    others[1].mkdir()
    live = root / "orders-acme-20240101T000001Z-eeeeeeeeeeee"
    live_fan_out = root / "orders-fanout-20240101T000001Z-ffffffffffff"
    with claim(live), claim(live_fan_out):  # a live transfer that has not made its folder yet holds its lock
        assert sorted(p.name for p in remove_stale_staging(root, model, recipient)) == [
            lock_only.name.removesuffix(".lock"), fan_out.name]
        assert sorted(p.name for p in root.iterdir()) == sorted([
            *(p.name for p in others), f"{live.name}.lock", f"{live_fan_out.name}.lock"])
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in others)


def test_a_lock_file_removed_while_a_transfer_waited_for_it_is_not_held(tmp_path: Path) -> None:
    """The cleanup of a dead transfer unlinks its lock; a process that was waiting on that file must lock
    the file now at the path, or a second cleanup would find the path free and remove live staging."""
    lock = tmp_path / "orders-acme-20240101T000000Z-aaaaaaaaaaaa.lock"
    held = threading.Event()
    release = threading.Event()

    def waiter() -> None:
        with exclusive_lock(lock):
            held.set()
            release.wait(10)

    with lock_if_free(lock) as free:  # a cleanup holds the dead transfer's lock ...
        assert free
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.2)
        assert not held.is_set()
        lock.unlink()  # ... and removes it
    assert held.wait(10)
    try:
        with lock_if_free(lock) as free:
            assert not free  # the waiter holds the file now at the path
    finally:
        release.set()
        thread.join(10)

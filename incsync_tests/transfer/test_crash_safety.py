"""Staging left behind by a crashed transfer is cleaned by the next run of the same (model, recipient), and a
live one is left alone. The crash matrix itself is the conformance suite's
(``incsync_tests/destinations/conformance/test_crashes.py``)."""

from __future__ import annotations

from pathlib import Path

from incsync_tests.support.destinations import destination_spec
from incsync_tests.support.lake import lake_config


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

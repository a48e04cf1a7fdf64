"""incsync.definitions builds module-level ``defs`` from $INCSYNC_CONFIG at import; give it a valid
file when the environment names none, so these tests can import build_definitions."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

if not os.environ.get("INCSYNC_CONFIG") and not Path("incsync.yaml").exists():
    from incsync_tests.support import lake_config

    os.environ["INCSYNC_CONFIG"] = str(lake_config(Path(tempfile.mkdtemp(prefix="incsync-import-"))))


import pytest  # noqa: E402


@pytest.fixture
def instance(tmp_path: Path):
    """A persistent (SQLite) Dagster instance in the test's own folder."""
    import dagster as dg

    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as inst:
        yield inst

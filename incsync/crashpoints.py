"""Named points where the crash-safety tests SIGKILL a transfer (``INCSYNC_TEST_CRASH_AT=<point>``).

Points: ``after_staging`` (batch staged and validated, nothing published), ``mid_publish`` (inside a
destination's publish, before its commit point), ``after_manifest`` (object storage: manifest
committed, state pointer not yet updated), ``after_publish`` (committed, staging not yet removed).
Unset, as it always is outside those tests, a point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "INCSYNC_TEST_CRASH_AT"
POINTS = ("after_staging", "mid_publish", "after_manifest", "after_publish")


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)

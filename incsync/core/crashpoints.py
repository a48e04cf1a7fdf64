"""Named points where the crash-safety tests SIGKILL a transfer (``INCSYNC_TEST_CRASH_AT=<point>``).

Points: ``after_claim`` (the staging folder's lock taken, nothing read yet), ``after_staging`` (batch
staged and validated, nothing published), ``mid_publish`` (inside a destination's publish, before its
commit point), ``after_manifest`` (object storage: manifest
committed, state pointer not yet updated), ``after_publish`` (committed, staging not yet removed).
``mid_copy`` (PostgreSQL: each chunk of the COPY sent). ``audit_after_transfers`` (the transfer log's
`transfers` table committed, its freshness not yet). ``INCSYNC_TEST_PAUSE_AT=<point>`` instead
stops there: it writes its pid to ``$INCSYNC_TEST_PAUSE_FILE`` and waits until the test removes that
file, so a test can SIGKILL the process, or kill its connection, at a known moment.
Unset, as it always is outside those tests, a point costs two environment lookups.
"""

from __future__ import annotations

import os
import signal
import time

CRASH_ENV = "INCSYNC_TEST_CRASH_AT"
PAUSE_ENV = "INCSYNC_TEST_PAUSE_AT"
PAUSE_FILE_ENV = "INCSYNC_TEST_PAUSE_FILE"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_ENV) == name:
        marker = os.environ[PAUSE_FILE_ENV]
        with open(marker, "w") as handle:
            handle.write(str(os.getpid()))
        deadline = time.monotonic() + 3600
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)

"""Run one transfer without Spark: ``python -m incsync_tests.support.arrow_transfer CONFIG WINDOW [--scheduled] [--full-refresh]``.

The crash-safety tests start it with ``INCSYNC_TEST_CRASH_AT`` set and expect it to die by SIGKILL;
they also call ``run`` in-process for the run that follows the crash.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from incsync.config.load import load_config
from incsync.destinations.registry import build_destination
from incsync.transfer.execute import run_transfer
from incsync.transfer.request import TransferOutcome, TransferRun
from incsync_tests.support.destinations import ArrowLakeSource


def _no_spark() -> None:
    return None  # the Arrow source reads without a Spark session


def run(
    config_path: str | Path,
    window: str,
    *,
    scheduled: bool,
    full_refresh: bool = False,
    model_name: str = "orders",
    recipient_id: str = "acme",
    staging_root: object = None,
) -> TransferOutcome:
    config = load_config(config_path)
    model = config.model(model_name)
    recipient = config.recipient(recipient_id)
    request = TransferRun.for_model(
        config, model, source=ArrowLakeSource(config.source(model.source)), spark=_no_spark, scheduled=scheduled, full_refresh=full_refresh,
    ).request(recipient, build_destination(config.destination(recipient.destination)), window)
    return run_transfer(request, staging_root=staging_root or Path(os.environ["INCSYNC_STAGING_DIR"]))


if __name__ == "__main__":
    outcome = run(sys.argv[1], sys.argv[2], scheduled="--scheduled" in sys.argv, full_refresh="--full-refresh" in sys.argv)
    print(outcome.record.transfer_id)

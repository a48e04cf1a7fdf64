"""A lake source: a row dated ahead of the clock does not pull the HW into the future.

The lake has no transactions to see, so its horizon is the local clock (lookback-only).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

from incsync.core.bounds import UTC
from incsync_tests.support.lake import order
from incsync_tests.transfer.test_edge_cases import Lake, counts


def test_a_future_dated_lake_row_leaves_the_hw_at_the_extraction_start(spark, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    if now + timedelta(minutes=3) >= (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0):
        time.sleep(200)  # rows and runs must share today's window
        now = datetime.now(UTC)
    yesterday = int(now.timestamp()) // 86400 * 86400 - 86400
    lake = Lake(tmp_path, spark, model={"min_start_time_epoch": yesterday}, lookback=1)
    present, ahead = now - timedelta(seconds=10), now + timedelta(minutes=2)
    rows = [order(1, "org_1", present), order(2, "org_1", ahead)]
    lake.write(rows)

    first = lake.run(now, scheduled=True)
    hw = first.record.high_watermark
    assert hw is not None and present <= hw <= datetime.now(UTC) < ahead
    assert (first.record.rows_transferred, first.record.extra["future_dated_rows"]) == (2, "1")
    assert first.record.extra["horizon"] == "lookback-only"
    assert lake.ids() == [1, 2]

    written_after = datetime.now(UTC)
    lake.write([*rows, order(4, "org_1", written_after)])  # committed after the run, dated "now"
    second = lake.run(now, scheduled=True)
    assert lake.ids() == [1, 2, 4], "the HW stayed at the extraction's start, so row 4 is within reach"
    assert second.record.extra["future_dated_rows"] == "1"
    assert counts(second)[0] == 2  # rows 2 (still ahead, read again) and 4; row 1 lies below floor(HW) - 1 s

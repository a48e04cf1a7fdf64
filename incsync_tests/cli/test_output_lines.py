"""`incsync transfer` prints a line per recipient, not per window partition (issue 29)."""

from __future__ import annotations

from incsync.cli.progress import RecipientLines
from incsync.operations.runs import TransferLine


def _line(recipient: str, window: str, rows: int | None = 1, hw: str | None = "2025-01-01T05:00:00+00:00",
          kind: str = "INCREMENTAL", ok: bool = True) -> TransferLine:
    return TransferLine("orders", recipient, window, rows, 0 if rows is None else rows - 1, hw, kind, ok)


def test_a_recipients_line_comes_when_all_its_windows_reported_and_says_what_failed() -> None:
    printed: list[str] = []
    lines = RecipientLines({"acme": 3, "globex": 1, "initech": 2}, printed.append)
    lines.add(_line("acme", "2025-01-02", rows=4, hw="2025-01-02T09:00:00+00:00"))
    lines.add(_line("globex", "2025-01-01", rows=2))
    lines.add(_line("acme", "2025-01-01", rows=3, kind="FULL_REFRESH"))
    assert printed == [str(_line("globex", "2025-01-01", rows=2))]  # one window: the window's own line
    lines.add(_line("acme", "2025-01-03", rows=None, hw=None, kind="", ok=False))
    lines.add(_line("initech", "2025-01-01", rows=None, hw=None, ok=False))
    lines.flush()  # initech's second window never reported (its run failed first)
    assert printed[1:] == [
        "orders       acme         2025-01-01 .. 2025-01-03 (3 windows) rows_transferred=7 delta_rows_transferred=5 "
        "high_watermark=2025-01-02T09:00:00+00:00 FULL_REFRESH+INCREMENTAL FAILED 1 of 3 windows",
        "orders       initech      2025-01-01        FAILED (1 of 2 windows reported)",
    ]

"""How `incsync transfer` shows a long transfer: a progress line on a terminal, then a line per recipient
(``--verbose``: per window partition). Standard library only at import time; rich is imported when a
progress bar is drawn.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(*, done: int, total: int, rows: int, elapsed: float, recipients_done: int = 0, recipients: int = 1) -> str:
    """``windows 12/40 · rows 1,234 · 410 rows/s · ETA 1m05s`` (ETA from the windows' pace so far)."""
    parts = [f"windows {done}/{total}"]
    if recipients > 1:
        parts.append(f"recipients {recipients_done}/{recipients}")
    parts.append(f"rows {rows:,}")
    if elapsed > 0 and done:
        parts.append(f"{rows / elapsed:,.0f} rows/s")
        parts.append(f"ETA {duration(elapsed / done * (total - done))}" if done < total else f"took {duration(elapsed)}")
    else:
        parts.append("ETA ?")
    return " · ".join(parts)


@dataclass
class Progress:
    """Counts windows and rows as the transfers commit them; draws a rich status line on a terminal."""

    total: int
    recipients: dict[str, int] = field(default_factory=dict)  # recipient -> its windows
    enabled: bool = True
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    rows: int = 0
    _done_by_recipient: dict[str, int] = field(default_factory=dict)
    # The windows reported so far, a bit each per recipient: a set of (recipient, window) pairs held ~120 bytes a
    # window, ~500 MB for a first sync of 10,000 recipients × 395 windows.
    _window_bits: dict[str, int] = field(default_factory=dict)
    _seen: dict[str, int] = field(default_factory=dict)
    _live: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and (self.total > 1 or len(self.recipients) > 1) and _is_terminal(sys.stderr):
            from rich.console import Console
            from rich.live import Live

            # A worker's relay of its client's terminal says how wide that terminal is.
            console = Console(file=sys.stderr, highlight=False, width=getattr(sys.stderr, "columns", None))
            self._live = Live(self.line(), console=console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def committed(self, recipient: str, window: str, rows: int) -> None:
        bit = 1 << self._window_bits.setdefault(window, len(self._window_bits))
        seen = self._seen.get(recipient, 0)
        if seen & bit:
            return
        self._seen[recipient] = seen | bit
        self.done += 1
        self.rows += rows
        self._done_by_recipient[recipient] = self._done_by_recipient.get(recipient, 0) + 1
        if self._live is not None:
            self._live.update(self.line())

    def line(self, *, now: float | None = None) -> str:
        finished = sum(1 for r, n in self.recipients.items() if self._done_by_recipient.get(r, 0) >= n)
        return progress_line(
            done=self.done, total=self.total, rows=self.rows, elapsed=(now or time.monotonic()) - self.started,
            recipients_done=finished, recipients=len(self.recipients),
        )


def recipient_line(lines: Sequence[Any]) -> str:
    """One recipient's windows in one line: the window range, the summed counts, the newest high watermark
    and how many windows failed (``lines`` are ``operations.runs.TransferLine``, in window order)."""
    if len(lines) == 1:
        return str(lines[0])
    first, ok = lines[0], [line for line in lines if line.ok]
    windows = f"{lines[0].window} .. {lines[-1].window} ({len(lines)} windows)"
    if not ok:
        return f"{first.model:<12} {first.recipient:<12} {windows} FAILED"
    hw = max((line.high_watermark for line in ok if line.high_watermark), default=None)
    kinds = "+".join(dict.fromkeys(line.transfer_type for line in ok if line.transfer_type))
    failed = f" FAILED {len(lines) - len(ok)} of {len(lines)} windows" if len(ok) < len(lines) else ""
    return (
        f"{first.model:<12} {first.recipient:<12} {windows} rows_transferred={sum(line.rows_transferred or 0 for line in ok)} "
        f"delta_rows_transferred={sum(line.delta_rows_transferred or 0 for line in ok)} high_watermark={hw} {kinds}{failed}"
    )


class RecipientLines:
    """Prints one line per recipient as soon as every one of its windows has reported (``recipient_line``)."""

    def __init__(self, windows: dict[str, int], emit: Callable[[str], None]) -> None:
        self._expected = windows
        self._lines: dict[str, list[Any]] = {}
        self._emit = emit

    def add(self, line: Any) -> None:
        lines = self._lines.setdefault(line.recipient, [])
        lines.append(line)
        if len(lines) == self._expected.get(line.recipient, 1):
            self._emit(recipient_line(sorted(self._lines.pop(line.recipient), key=lambda x: x.window)))

    def flush(self) -> None:
        """The recipients whose windows did not all report (a run that failed before it recorded them)."""
        for recipient in sorted(self._lines):
            lines = sorted(self._lines.pop(recipient), key=lambda x: x.window)
            self._emit(f"{recipient_line(lines)} ({len(lines)} of {self._expected.get(recipient, 1)} windows reported)")


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

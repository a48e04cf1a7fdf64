"""Transfer plans: which (window, recipient) partitions of a run become one read, and how the rows
of that read are attributed back to windows and split into commits. Pure: no Spark, no I/O.

docs/design.md#transfer-plans: windows are the unit of bookkeeping, not of execution. Per recipient, each
maximal run of contiguous windows is one transfer (a *span*); its rows are split into batches only by
size, at window boundaries, so every window lies in exactly one commit and a retry resumes at the
first window whose commit did not land.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from incsync.core.bounds import to_micros

if TYPE_CHECKING:  # numpy is imported where rows are counted: a code server does not load it
    import numpy as np


class HasWindow(Protocol):
    @property
    def recipient_id(self) -> str: ...
    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime: ...


W = TypeVar("W", bound=HasWindow)


@dataclass(frozen=True)
class Span(Generic[W]):
    """Contiguous windows of one recipient, read as one transfer ``[L(first), U(last))``."""

    recipient_id: str
    windows: tuple[W, ...]

    @property
    def start(self) -> datetime:
        return self.windows[0].start

    @property
    def end(self) -> datetime:
        return self.windows[-1].end


def coalesce(cells: Sequence[W], *, whole_recipient: frozenset[str] = frozenset()) -> list[Span[W]]:
    """Group cells by recipient and split each recipient's sorted windows where they stop touching.

    Recipients in ``whole_recipient`` (a full refresh: one transfer from the start, published once)
    get one span over all their windows, gaps included. Order: recipients as first seen, spans by time.
    """
    by_recipient: dict[str, list[W]] = {}
    for cell in cells:
        by_recipient.setdefault(cell.recipient_id, []).append(cell)
    spans: list[Span[W]] = []
    for rid, group in by_recipient.items():
        group = sorted({(c.start, c.end): c for c in group}.values(), key=lambda c: c.start)
        if rid in whole_recipient:
            spans.append(Span(rid, tuple(group)))
            continue
        run: list[W] = [group[0]]
        for cell in group[1:]:
            if cell.start == run[-1].end:
                run.append(cell)
            else:
                spans.append(Span(rid, tuple(run)))
                run = [cell]
        spans.append(Span(rid, tuple(run)))
    return spans


def window_starts(windows: Sequence[HasWindow]) -> list[int]:
    return [to_micros(w.start) for w in windows]


@dataclass(frozen=True)
class WindowCounts:
    """Rows (and rows newer than the previous HW) whose last-modified counts in each window."""

    rows: tuple[int, ...]
    delta_rows: tuple[int, ...]
    max_micros: tuple[int | None, ...]  # greatest last-modified per window, None when empty


class WindowCounter:
    """``count_by_window`` fed in chunks: the span's last-modified values never need to be in memory at
    once (a big tenant's backfill reads them a row group at a time); the counts are the same."""

    def __init__(self, windows: Sequence[HasWindow], *, delta_after_micros: int | None) -> None:
        import numpy as np

        self._starts = np.asarray(window_starts(windows), dtype=np.int64)
        self._delta_after = delta_after_micros
        n = len(self._starts)
        self._rows = np.zeros(n, dtype=np.int64)
        self._delta = np.zeros(n, dtype=np.int64)
        self._top = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)

    def add(self, last_modified_micros: Sequence[int] | np.ndarray) -> None:
        """Attribute each row to its window: the first window also takes the lookback overlap below it,
        the last anything above it."""
        import numpy as np

        values = np.asarray(last_modified_micros, dtype=np.int64)
        n = len(self._starts)
        index = np.clip(np.searchsorted(self._starts, values, side="right") - 1, 0, n - 1)
        self._rows += np.bincount(index, minlength=n)
        newer = index if self._delta_after is None else index[values > self._delta_after]
        self._delta += np.bincount(newer, minlength=n)
        np.maximum.at(self._top, index, values)

    def counts(self) -> WindowCounts:
        return WindowCounts(
            rows=tuple(int(x) for x in self._rows),
            delta_rows=tuple(int(x) for x in self._delta),
            max_micros=tuple(int(t) if c else None for t, c in zip(self._top, self._rows, strict=False)),
        )


def count_by_window(
    windows: Sequence[HasWindow], last_modified_micros: Sequence[int] | np.ndarray, *, delta_after_micros: int | None
) -> WindowCounts:
    """Attribute each row to its window (``WindowCounter``); ``delta_after_micros`` None: every row is new."""
    counter = WindowCounter(windows, delta_after_micros=delta_after_micros)
    counter.add(last_modified_micros)
    return counter.counts()


def plan_batches(rows_per_window: Sequence[int], max_rows: int) -> list[range]:
    """Consecutive window index ranges, each holding at most ``max_rows`` rows unless one window alone
    holds more (a window is never split: it is the resume point). Empty windows join the batch they
    follow, so they cost no commit of their own; at least one batch, so an empty span is recorded."""
    if max_rows < 1:
        raise ValueError("max_rows must be at least 1")
    batches: list[range] = []
    first, held = 0, 0
    for i, n in enumerate(rows_per_window):
        if n and held and held + n > max_rows:
            batches.append(range(first, i))
            first, held = i, 0
        held += n
    batches.append(range(first, len(rows_per_window)))
    return batches

"""A model's window grid: the one place windows are computed. Pure: no Dagster, no I/O.

Windows are aligned to the UTC epoch: a window of ``seconds`` starts at a multiple of ``seconds``
(the config only accepts sizes that divide a day). A model's grid starts at the first boundary at or
after its ``min_start_time_epoch`` and includes the still-open window. ``operations.partitions``
builds Dagster's partitions from the same cron and key format.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from incsync.core.bounds import UTC, ModelStart, RecipientStart, epoch_seconds_floor, from_epoch, recipient_start


class GridModel(ModelStart, Protocol):
    """What a model's grid is made of: its start and its window size (a model of the configuration is one)."""

    @property
    def max_transfer_time_window_seconds(self) -> int: ...


@dataclass(frozen=True, order=True)
class Window:
    """One window ``[start, end)`` of a model's grid, named by its key (``2025-01-01``, ``2025-01-01-06:00``)."""

    start: datetime
    end: datetime
    key: str


@dataclass(frozen=True)
class WindowPartition:
    """One (window, recipient) cell of a model's grid: the unit of bookkeeping of a run."""

    window: Window
    recipient_id: str

    @property
    def key(self) -> tuple[str, str]:
        return self.window.key, self.recipient_id

    @property
    def window_key(self) -> str:
        return self.window.key

    @property
    def start(self) -> datetime:
        return self.window.start

    @property
    def end(self) -> datetime:
        return self.window.end


def window_cron(seconds: int) -> str:
    """The cron whose ticks are the window boundaries."""
    if seconds == 86_400:
        return "0 0 * * *"
    minutes = seconds // 60
    if minutes < 60:
        return f"*/{minutes} * * * *" if minutes > 1 else "* * * * *"
    hours = minutes // 60
    return f"0 */{hours} * * *" if hours > 1 else "0 * * * *"


def window_format(seconds: int) -> str:
    return "%Y-%m-%d" if seconds == 86_400 else "%Y-%m-%d-%H:%M"


def _window_starting(model: GridModel, start_epoch: int) -> Window:
    seconds = model.max_transfer_time_window_seconds
    start = from_epoch(start_epoch)
    return Window(start=start, end=from_epoch(start_epoch + seconds), key=start.strftime(window_format(seconds)))


def grid_start(model: GridModel) -> datetime:
    """Start of the model's first window: the first boundary at or after ``min_start_time_epoch``."""
    seconds = model.max_transfer_time_window_seconds
    return from_epoch(-(-model.min_start_time_epoch // seconds) * seconds)


def window_at(model: GridModel, ts: datetime) -> Window:
    """The window holding ``ts``."""
    seconds = model.max_transfer_time_window_seconds
    return _window_starting(model, epoch_seconds_floor(ts) // seconds * seconds)


def window_key_for(model: GridModel, ts: datetime) -> str:
    return window_at(model, ts).key


def window_of(model: GridModel, key: str) -> Window:
    """The window a key names; ValueError for text that is not a key of this model's grid."""
    seconds = model.max_transfer_time_window_seconds
    start = datetime.strptime(key, window_format(seconds)).replace(tzinfo=UTC)
    window = window_at(model, start)
    if window.key != key:
        raise ValueError(f"{key!r} is not a window boundary of {seconds}-second windows")
    return window


def windows_between(model: GridModel, first: datetime, last: datetime) -> list[Window]:
    """Every window of the grid from the one holding ``first`` to the one holding ``last``, in order;
    none before the grid's start."""
    seconds = model.max_transfer_time_window_seconds
    begin = max(epoch_seconds_floor(first) // seconds * seconds, int(grid_start(model).timestamp()))
    stop = epoch_seconds_floor(last) // seconds * seconds
    return [_window_starting(model, s) for s in range(begin, stop + 1, seconds)]


def recipient_windows(model: GridModel, recipient: RecipientStart, *, until: datetime | None = None) -> list[Window]:
    """A recipient's windows, from the first that ends after its start to the one holding ``until`` (default: now)."""
    start = recipient_start(model, recipient)
    return [w for w in windows_between(model, start, until or datetime.now(UTC)) if w.end > start]


def scheduled_windows(model: GridModel, *, now: datetime | None = None, previous_tick: datetime | None = None) -> list[Window]:
    """What a run launched at ``now`` covers: the open window, plus the window that closed since
    ``previous_tick``. Without a previous tick (a command-line run) it includes the previous window,
    so a run just after a window closed still gives that window its final pass."""
    now = now or datetime.now(UTC)
    if now < grid_start(model):
        return []
    current = window_at(model, now)
    if current.start > grid_start(model) and (previous_tick is None or previous_tick < current.start):
        return [window_at(model, from_epoch(current.start.timestamp() - 1)), current]
    return [current]


def initial_backfill_span(model: GridModel, recipient: RecipientStart, now: datetime) -> tuple[datetime, datetime] | None:
    """From the recipient's start (never before the model's first window) to the open window at ``now``;
    None while that start lies in the future."""
    first = max(recipient_start(model, recipient), grid_start(model))
    return None if first > now else (first, now)


def tick_span(model: GridModel, *, previous_tick: datetime, tick: datetime) -> tuple[datetime, datetime] | None:
    """The window open at ``tick`` plus every window that closed after ``previous_tick``.

    A window ``[s, e)`` closed since the previous tick when ``previous_tick < e <= tick``: the
    earliest of them is the one holding ``previous_tick``. None before the model's grid starts.
    """
    start = grid_start(model)
    if tick < start:
        return None
    return max(previous_tick, start), tick


def open_window_end(model: GridModel, now: datetime) -> datetime:
    """End of the window holding ``now``."""
    return window_at(model, now).end

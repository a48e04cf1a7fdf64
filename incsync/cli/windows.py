"""Window keys from the command line: ``--window`` (one key) and ``--from``/``--to`` (a range), checked
against the model's grid with one-line errors that show a valid key."""

from __future__ import annotations

from datetime import datetime

from incsync.config.model import ModelConfig
from incsync.core.bounds import UTC
from incsync.core.windows import grid_start, window_format, window_key_for
from incsync.errors import InputError


def describe_windows(seconds: int) -> str:
    if seconds == 86_400:
        return "daily windows"
    if seconds % 3600 == 0:
        return "hourly windows" if seconds == 3600 else f"{seconds // 3600}-hour windows"
    return f"{seconds // 60}-minute windows"


def _example(model: ModelConfig) -> str:
    return grid_start(model).strftime(window_format(model.max_transfer_time_window_seconds))


def _parse(text: str, fmt: str) -> tuple[datetime, bool] | None:
    """(instant, whether ``text`` is written as a window key), or None."""
    try:
        return datetime.strptime(text, fmt).replace(tzinfo=UTC), True
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)), False


def window_key(model: ModelConfig, text: str, *, flag: str, exact: bool = False) -> str:
    """The window key ``text`` names (``exact``: it must be a key; else any ISO date or time, whose window is taken)."""
    seconds = model.max_transfer_time_window_seconds
    fmt = window_format(seconds)
    what = f"model {model.model_name} has {describe_windows(seconds)} keyed like {_example(model)}"
    parsed = _parse(text, fmt)
    if parsed is None:
        raise InputError(f"{flag} {text}: not a window — {what}")
    at, is_key = parsed
    key = window_key_for(model, at)
    if exact and (not is_key or key != text):
        raise InputError(f"{flag} {text}: not a window key — {what}; the window holding {text} is {key}")
    first = grid_start(model)
    if datetime.strptime(key, fmt).replace(tzinfo=UTC) < first:
        raise InputError(f"{flag} {text}: before the model's first window — {what} (min_start_time_epoch)")
    if exact and at > datetime.now(UTC):
        raise InputError(f"{flag} {text}: in the future — the newest window is {window_key_for(model, datetime.now(UTC))}")
    return key


def backfill_windows(model: ModelConfig, keys: list[str], start: str | None, end: str | None) -> list[str]:
    """``keys`` (a recipient's windows, in order) within ``--from``..``--to`` (both inclusive)."""
    lo = window_key(model, start, flag="--from") if start else None
    hi = window_key(model, end, flag="--to") if end else None
    if lo and hi and lo > hi:
        raise InputError(f"--from {start} is after --to {end}: swap them")
    return [k for k in keys if (lo is None or k >= lo) and (hi is None or k <= hi)]

"""Listeners told of each committed (model, recipient, window) in this process: the CLI's progress and lines.

A run executed in this process (``incsync transfer``, the worker) calls them from the IO manager as
each commit lands; runs in other processes (the daemon, the UI) have none registered.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Committed:
    """One window of a commit, with the counts its materialization carries."""

    run_id: str
    model: str
    recipient: str
    window: str
    rows: int
    delta_rows: int
    high_watermark: datetime | None
    transfer_type: str


Listener = Callable[[Committed], None]
_listeners: list[Listener] = []
log = logging.getLogger(__name__)


def committed(event: Committed) -> None:
    for listener in list(_listeners):
        try:
            listener(event)
        except Exception:
            log.debug("progress listener failed", exc_info=True)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)

"""Listeners told of each committed (model, recipient, window) in this process: the CLI's progress.

A run executed in this process (``incsync transfer``) calls them from the IO manager as each commit
lands; runs in other processes (the daemon, the UI) have none registered.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

Listener = Callable[[str, str, str, int], None]  # model, recipient, window key, rows
_listeners: list[Listener] = []
log = logging.getLogger(__name__)


def committed(model: str, recipient: str, window: str, rows: int) -> None:
    for listener in list(_listeners):
        try:
            listener(model, recipient, window, rows)
        except Exception:  # noqa: BLE001 - progress never fails a transfer
            log.debug("progress listener failed", exc_info=True)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)

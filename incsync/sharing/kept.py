"""The states of shared Delta tables in local folders, kept per table and version: a committed version never
changes, so its state (protocol, metadata, owner, files) is answered again without delta-rs listing and reading
the log (docs/sharing.md, benchmarks/HISTORY.md: ~28 % of the server's busy time).

A kept state serves while the commit file it was read from is still the same file (its modification time and
size): a table deleted and created again has other files. The latest version is known while no next commit file
exists, since Delta numbers commits without gaps and a writer's next commit is ``latest + 1``: two ``stat``
calls. Objects are kept as given (``delta_log.TableState``); callers never change them.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

MAX_KEPT = 4096  # states; the oldest used goes first

_states: OrderedDict[tuple[str, int, bool], tuple[tuple[int, int], object]] = OrderedDict()
_latest: dict[str, int] = {}
_lock = threading.Lock()


def log_name(version: int) -> str:
    """A commit file's path under the table's root."""
    return f"_delta_log/{version:020d}.json"


def _stamp(root: str, version: int) -> tuple[int, int] | None:
    try:
        found = os.stat(Path(root) / log_name(version))
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def known_latest(root: str) -> int | None:
    """The table's latest version when a kept read still holds: no next commit, the same last commit file."""
    latest = _latest.get(root)
    if latest is None or _stamp(root, latest + 1) is not None or _stamp(root, latest) is None:
        return None
    return latest


def state(root: str, version: int | None, with_files: bool) -> object | None:
    """The kept state of ``version`` (None: the latest), or None when it must be read."""
    version = known_latest(root) if version is None else version
    if version is None:
        return None
    stamp = _stamp(root, version)
    with _lock:
        for key in ((root, version, with_files), (root, version, True)):  # a state with its files serves one without
            entry = _states.get(key)
            if entry is not None and entry[0] == stamp:
                _states.move_to_end(key)
                return entry[1]
    return None


def keep(root: str, version: int, with_files: bool, found: object, *, latest: bool) -> None:
    """Keep ``found``, the state of ``version`` just read; ``latest``: delta-rs found it the latest."""
    stamp = _stamp(root, version)
    if stamp is None:
        return
    with _lock:
        _states[(root, version, with_files)] = (stamp, found)
        while len(_states) > MAX_KEPT:
            _states.popitem(last=False)
        if latest:  # an older answer racing a newer one is found stale at the next request
            _latest[root] = version

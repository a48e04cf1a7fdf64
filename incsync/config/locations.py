"""Where a destination physically writes, so `validate` compares destinations by location, not by name.

Local paths are made absolute and resolved (``..``, symlinks, trailing slashes, ``file://``); storage URLs
are normalised (scheme aliases, bucket case, key prefix). A kind that writes elsewhere than a folder says
where in its model's ``location`` (``config/destinations/``): a database server's kinds by server, port and
database, never by a secret. Secrets never enter a location.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from incsync.storage.names import local_path

if TYPE_CHECKING:
    from incsync.config.destinations import DestinationConfig
    from incsync.config.model import IncsyncConfig

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "abfs": "abfss", "wasb": "wasbs", "gcs": "gs"}
LOOPBACK = {"", "localhost", "127.0.0.1", "::1", "[::1]"}


@dataclass(frozen=True)
class Location:
    """A destination's root as a comparable key, and how to show it (never with a secret)."""

    kind: str  # "path" (a local folder or a storage URL: roots may nest), or a kind of its own (its model's `location`)
    key: str
    shown: str
    note: str | None = None  # why the comparison was partial (e.g. the DSN's variable is unset)


def resolved_path(path: str, base: Path, *, _folders: dict[str, str] | None = None) -> str:
    """An absolute, normalised, symlink-resolved path; ``file://`` URLs are local paths.

    ``_folders`` caches resolved folders across calls: 10,000 destinations under one folder then cost one
    ``lstat`` each rather than one per component.
    """
    path = os.path.join(base, os.path.expanduser(local_path(path)))
    if _folders is None:
        return os.path.realpath(path)
    folder, name = os.path.split(path)
    if name in ("", ".", "..") or not folder:
        return os.path.realpath(path)
    real_folder = _folders.get(folder)
    if real_folder is None:
        real_folder = _folders[folder] = os.path.realpath(folder)
    joined = os.path.join(real_folder, name)
    # realpath resolves left to right, so a folder's resolution extends by one plain name as is
    return os.path.realpath(joined) if os.path.islink(joined) else joined


def storage_url(url: str) -> str:
    """``scheme://bucket/prefix`` with the scheme's aliases folded, the bucket lower-cased and the prefix
    normalised (no ``.``/``..``, repeated or trailing slashes)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    prefix = "/" + posixpath.normpath(unquote(parts.path).lstrip("/")) if parts.path.strip("/") else ""
    return f"{scheme}://{parts.netloc.lower()}{prefix.rstrip('/')}"


def location(destination: DestinationConfig, base: Path, *, _folders: dict[str, str] | None = None) -> Location:
    """Where ``destination`` writes; relative paths are taken against ``base`` (the config file's folder)."""
    return destination.location(base, folders=_folders)


def folder_or_url(path: str, base: Path, *, folders: dict[str, str] | None = None) -> str:
    """A storage URL normalised, or a local path resolved against ``base``."""
    return storage_url(path) if "://" in path and not path.startswith("file:") else resolved_path(path, base, _folders=folders)


def shared_location_problems(cfg: IncsyncConfig, base: Path) -> list[str]:
    """One problem per pair of destinations of different recipients that write to one place.

    Equal roots are refused except object-storage prefixes (each recipient's keys are disjoint there);
    roots nested inside each other are always refused.
    """
    return _compare(cfg, base)


def location_notes(cfg: IncsyncConfig, base: Path) -> list[str]:
    """What the comparison could not see (e.g. an unset DSN variable), for `incsync validate` to print.

    Only locations read from the environment carry notes, so no path is resolved again for them.
    """
    used = {r.destination for r in cfg.recipients}
    notes = (d.location_note() for d in cfg.destinations if d.name in used)
    return sorted({note for note in notes if note})


def _parents(key: str) -> list[str]:
    """The folders (or URL prefixes) that hold ``key``, nearest first."""
    out = []
    while True:
        parent = key.rsplit("/", 1)[0] if "://" in key else posixpath.dirname(key)
        if not parent or parent == key or parent.endswith(":/") or parent == "/":
            return out
        out.append(parent)
        key = parent


def _compare(cfg: IncsyncConfig, base: Path) -> list[str]:
    users: dict[str, list[str]] = {}
    for r in cfg.recipients:
        users.setdefault(r.destination, []).append(r.id)
    index = {d.name: i for i, d in enumerate(cfg.destinations)}
    folders: dict[str, str] = {}
    located = [(d, location(d, base, _folders=folders)) for d in cfg.destinations if users.get(d.name)]
    by_key: dict[tuple[str, str], list[tuple[DestinationConfig, Location]]] = {}
    for d, loc in located:
        by_key.setdefault((loc.kind, loc.key), []).append((d, loc))
    problems: list[str] = []

    def clash(a: DestinationConfig, b: DestinationConfig, shown: str, how: str) -> None:
        ra, rb = ", ".join(users[a.name]), ", ".join(users[b.name])
        problems.append(
            f'destinations[{index[b.name]}]: "{b.name}" (recipient {rb}) {how} "{a.name}" (recipient {ra}): {shown}; '
            f"{'an' if b.kind[0] in 'aeiou' else 'a'} {b.kind} destination holds one recipient's copy, "
            f"so give \"{b.name}\" a location of its own"
        )

    for (kind, key), group in by_key.items():
        first, loc = group[0]
        for other, _ in group[1:]:
            if first.kind == other.kind and first.shares_location:
                continue  # one prefix, keys per recipient by design
            clash(first, other, loc.shown, "writes to the same location as")
        if kind == "path":
            for parent in _parents(key):
                for outer, _ in by_key.get(("path", parent), []):
                    # Named against the one listed later: a table row that lands on the file's (or an
                    # earlier row's) location is refused alone (docs/design.md#recipients-and-secrets-as-data).
                    if index[outer.name] > index[first.name]:
                        clash(first, outer, f"{key} lies inside {parent}", "holds inside its location")
                    else:
                        clash(outer, first, f"{key} lies inside {parent}", "writes inside the location of")
    return problems

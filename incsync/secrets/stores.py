"""The secret store interface and its two stores: environment variables, and the vault.

``open_secret(ref, used_by=...)`` is what a destination calls where it makes a connection, and nowhere else:
the value lives in the caller's memory for that connection, never in a log line, an error, Dagster's
metadata, tags or run config, or the audit tables. The vault's sealed values (never the opened ones) are kept
per process for ``CACHE_SECONDS``, read in one query: a run that connects to a thousand destinations reads
the table about once, and a changed entry is seen within that time.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from pydantic import SecretStr

from incsync.config.secrets import SecretRef, VaultPlace
from incsync.errors import ConfigError
from incsync.secrets.errors import VaultError
from incsync.secrets.keys import KeyRing
from incsync.secrets.vault import Entry, VaultTable

CACHE_SECONDS = 30.0
MISS_RETRY_SECONDS = 1.0  # a name missing from a fresh read is looked up again no sooner than this


class SecretStore(Protocol):
    """Where secrets are kept, by name."""

    def open(self, name: str, *, used_by: str) -> SecretStr:
        """The secret ``name``; ``used_by`` (``destinations[x].dsn_secret``) names the setting in errors."""
        ...


class EnvironmentStore:
    """Secrets in environment variables: the variable's name is the secret's."""

    def __init__(self, what: str = "the secret") -> None:
        self.what = what

    def open(self, name: str, *, used_by: str) -> SecretStr:
        value = os.environ.get(name)
        if value is None:
            raise ConfigError("environment", [f"{used_by}: variable {name} is not set; export {self.what} in it"])
        return SecretStr(value)


class VaultStore:
    """Secrets sealed in the vault's table under its keys."""

    def __init__(self, place: VaultPlace) -> None:
        self.place = place
        self.table = VaultTable(place)

    def open(self, name: str, *, used_by: str) -> SecretStr:
        sealed = _sealed(self.place, name)
        if sealed is None:
            raise VaultError(f"{used_by}: vault entry {name} does not exist in {self.place.shown}; store it with "
                             f"`incsync secrets set {name}` (the value is read from standard input)")
        return SecretStr(KeyRing.load(self.place).open(name, sealed))

    def set(self, name: str, value: str) -> Entry:
        """Seal ``value`` under the newest key as entry ``name`` (created or replaced)."""
        keys = KeyRing.load(self.place)
        self.table.put(name, keys.seal(name, value), key_id=keys.primary_id)
        forget(self.place)
        return next(e for e in self.table.entries() if e.name == name)

    def delete(self, name: str) -> bool:
        removed = self.table.delete(name)
        forget(self.place)
        return removed

    def entries(self) -> list[Entry]:
        return self.table.entries()

    def rotate(self) -> tuple[int, int]:
        """Re-seal every entry not sealed under the newest key; (re-sealed, already under it). Each entry is opened
        with the key that sealed it, so every older key it names must still be in the ring."""
        keys = KeyRing.load(self.place)
        resealed = current = 0
        for name, sealed in sorted(self.table.sealed().items()):
            if KeyRing.sealed_by(sealed) == keys.primary_id:
                current += 1
                continue
            if self.table.replace(name, sealed, keys.seal(name, keys.open(name, sealed)), key_id=keys.primary_id):
                resealed += 1
            else:
                current += 1  # set again meanwhile: under the newest key
        forget(self.place)
        return resealed, current


def store_for(ref: SecretRef, *, what: str = "the secret") -> SecretStore:
    """The store ``ref`` names."""
    if ref.store == "env":
        return EnvironmentStore(what)
    if ref.vault is None:
        raise VaultError(f"{ref} names the vault, but the configuration has no `vault:` section; add one (docs/secrets.md)")
    return VaultStore(ref.vault)


def open_secret(ref: SecretRef, *, used_by: str, what: str = "the secret") -> SecretStr:
    """The secret ``ref`` names, for the connection about to be made (a value ``held`` on this thread first)."""
    lent: SecretStr | None = getattr(_held, "values", {}).get(str(ref))
    if lent is not None:
        return lent
    return store_for(ref, what=what).open(ref.name, used_by=used_by)


_held = threading.local()


@contextlib.contextmanager
def held(ref: SecretRef, value: SecretStr) -> Iterator[None]:
    """``ref`` opens as ``value`` on this thread inside the block: a destination entered on the onboarding page is
    checked with the secret just typed, before anything is stored."""
    values = getattr(_held, "values", None)
    if values is None:
        values = _held.values = {}
    values[str(ref)] = value
    try:
        yield
    finally:
        values.pop(str(ref), None)


_cache: dict[str, tuple[float, dict[str, str]]] = {}
_cache_lock = threading.Lock()


def _sealed(place: VaultPlace, name: str) -> str | None:
    """Entry ``name``'s sealed value, from this process's copy of the table read at most CACHE_SECONDS ago (again
    sooner when the name is missing from it: it may have been set since)."""
    now = time.monotonic()
    with _cache_lock:
        read_at, sealed = _cache.get(place.key, (float("-inf"), {}))
    if now - read_at > CACHE_SECONDS or (name not in sealed and now - read_at > MISS_RETRY_SECONDS):
        sealed = VaultTable(place).sealed()
        with _cache_lock:
            _cache[place.key] = (time.monotonic(), sealed)
    return sealed.get(name)


def forget(place: VaultPlace) -> None:
    """Drop this process's copy of the vault at ``place`` (after a change to it)."""
    with _cache_lock:
        _cache.pop(place.key, None)

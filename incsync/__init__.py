"""incsync: incremental, per-recipient data transfer from multi-tenant tables, on Dagster and PySpark."""

from __future__ import annotations

from typing import Any

__all__ = ["janitor", "latest_versions", "read_manifested"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import incsync.definitions` stays cheap.
    if name == "janitor":
        from incsync.destinations.object_storage.janitor import janitor

        return janitor
    if name in __all__:
        from incsync.destinations.object_storage import reader as manifest_reader

        return getattr(manifest_reader, name)
    raise AttributeError(name)

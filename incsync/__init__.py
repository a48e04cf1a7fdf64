"""incsync: incremental, per-recipient data transfer from multi-tenant tables, on Dagster and PySpark."""

from __future__ import annotations

from typing import Any

__all__ = ["janitor", "latest_versions", "read_manifested"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import incsync.definitions` stays cheap.
    if name in __all__:
        from incsync.destinations import object_storage

        return getattr(object_storage, name)
    raise AttributeError(name)

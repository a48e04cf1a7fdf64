"""incsync: incremental, per-recipient data transfer from multi-tenant tables, on Dagster and PySpark."""

from __future__ import annotations

from typing import Any

__all__ = ["IncsyncComponent", "janitor", "latest_versions", "read_manifested"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import incsync.definitions` stays cheap and the thin worker client never imports Dagster.
    if name == "IncsyncComponent":  # what `dg scaffold defs incsync.IncsyncComponent` names (docs/dagster.md)
        from incsync.orchestration.component import IncsyncComponent

        return IncsyncComponent
    if name == "janitor":
        from incsync.destinations.object_storage.janitor import janitor

        return janitor
    if name in __all__:
        from incsync.destinations.object_storage import reader as manifest_reader

        return getattr(manifest_reader, name)
    raise AttributeError(name)


def __dir__() -> list[str]:
    # `dg` lists a registry module's components by dir(): the lazy names must show there too.
    return sorted({*globals(), *__all__})

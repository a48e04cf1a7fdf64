"""Maintenance of the destinations (docs/design.md#maintenance): the pass `incsync maintain` and the
`incsync_maintenance` job (``orchestration.housekeeping``) run.

Each destination is maintained while this holds every place of its transfer slot (``slots``), so no
transfer publishes to it meanwhile and none waits on it for longer than one destination's pass.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from incsync.config.model import IncsyncConfig
from incsync.destinations.maintenance import Maintained
from incsync.destinations.registry import build_destination
from incsync.errors import ConfigError


def maintain_destinations(
    config: IncsyncConfig, *, instance: Any, dry_run: bool = False, destination: str | None = None,
    model: str | None = None, notify: Callable[[str], None] | None = None,
) -> Iterator[Maintained]:
    """Maintain each destination of the file (or only ``destination``) for its models (or only ``model``)."""
    from incsync.operations.slots import destination_slot, holding_all, instance_backend

    targets = [d for d in config.destinations if destination in (None, d.name)]
    if destination is not None and not targets:
        raise ConfigError("--destination", [f'"{destination}" is not a destination of the file; known: '
                                            f'[{", ".join(d.name for d in config.destinations)}]'])
    models = [m for m in config.models if model in (None, m.model_name)]
    if model is not None and not models:
        raise ConfigError("--model", [f'"{model}" is not a model of the file; known: '
                                      f'[{", ".join(m.model_name for m in config.models)}]'])
    say = notify or (lambda message: print(f"incsync: {message}", file=sys.stderr, flush=True))
    holder = f"incsync maintenance{' (dry run)' if dry_run else ''}"
    backend = None
    try:
        for target in targets:
            built = build_destination(target)
            if not built.capabilities.maintained:
                continue
            backend = backend or instance_backend(instance, holder)
            with holding_all(destination_slot(target), backend, holder=holder, notify=say):
                yield from built.maintain(models, compact=config.maintenance.compact, dry_run=dry_run)
    finally:
        if backend is not None:
            backend.close()


def summary(done: list[Maintained]) -> dict[str, Any]:
    """Totals of a pass, as the run's metadata and the CLI's last line."""
    worked = [m for m in done if not m.skipped]
    return {
        "tables": len(done),
        "tables_skipped": len(done) - len(worked),
        "files_compacted": sum(m.files_compacted for m in worked),
        "files_vacuumed": sum(m.files_vacuumed for m in worked),
        "bytes_stored_before": sum(m.bytes_stored_before for m in worked),
        "bytes_stored_after": sum(m.bytes_stored_after for m in worked),
        "bytes_live": sum(m.bytes_live for m in worked),
    }

"""Connectivity checks for `incsync validate --connect`: every source and destination is reached."""

from __future__ import annotations

from pathlib import Path

from incsync.config import (
    DeltaDestinationConfig,
    IncsyncConfig,
    LakeSourceConfig,
    ObjectStorageDestinationConfig,
    PostgresDestinationConfig,
)
from incsync.errors import ConfigError, IncsyncError


def check_connectivity(config: IncsyncConfig) -> list[str]:
    """One line per source or destination that cannot be reached, naming it and the fix."""
    problems: list[str] = []
    for source in config.sources:
        if isinstance(source, LakeSourceConfig) and source.format != "table" and not Path(source.path or "").is_dir():
            problems.append(f"sources[{source.name}].path: folder {source.path} does not exist; create it or fix the path")
    for destination in config.destinations:
        if isinstance(destination, PostgresDestinationConfig):
            from incsync.destinations.postgres import PostgresDestination

            try:
                PostgresDestination(destination).check()
            except ConfigError as exc:
                problems.extend(exc.problems)
            except IncsyncError as exc:
                problems.append(" ".join(str(exc).split()))
        if isinstance(destination, DeltaDestinationConfig | ObjectStorageDestinationConfig) and "://" not in destination.path:
            parent = Path(destination.path).parent
            if not parent.exists():
                problems.append(
                    f"destinations[{destination.name}].path: parent folder {parent} does not exist; create it"
                )
    return problems

"""The one home of what incsync needs from Dagster and its storage beyond their public APIs.

Each function names the private behaviour it relies on; ``incsync_tests/test_dagster_compat.py`` pins
each one, so a Dagster upgrade that changes it fails there, not silently in a transfer.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from typing import Any

import dagster as dg

from incsync.errors import ConfigError


def add_partition_metadata(context: dg.OutputContext, metadata: Mapping[str, Mapping[str, Any]]) -> None:
    """Attach each partition's own metadata to the materializations Dagster records for the output.

    The public ``AssetExecutionContext.add_asset_metadata(partition_key=...)`` recomputes the run's
    whole partition range on every call (O(windows × recipients) each, so quadratic for a run); this
    sets all partitions at once on the step's metadata accumulator, which Dagster reads when it
    builds each partition's materialization (``execute_step._get_output_asset_events``).
    """
    from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator

    step = context.step_context
    current = step._metadata_accumulator  # noqa: SLF001 - see the docstring
    merged = dict(current.per_output_metadata)
    for partition, values in metadata.items():
        handle = AssetMetadataHandle(asset_key=context.asset_key, partition_key=str(partition))
        merged[handle] = {**merged.get(handle, {}), **values}
    step._metadata_accumulator = OutputMetadataAccumulator(per_output_metadata=merged)  # noqa: SLF001


_TUNED = False
SQLITE_SYNC_ENV_VAR = "INCSYNC_SQLITE_SYNC"
_SYNC_MODES = ("off", "normal", "full")


def tune_sqlite_storage() -> None:
    """Let Dagster's SQLite storage write events without an fsync each (``PRAGMA synchronous``).

    Dagster opens, commits and closes a connection per event, and with SQLite's default each commit
    and each close waits for the disk: a run of 400 windows (800 events) spent most of its time in
    fsync here (4-5 ms an event; 0.1 ms without). The default here is ``off``: an application crash
    loses nothing, an operating-system crash or power loss may lose or damage the newest part of the
    run history. incsync's own state (HW, transfer records) lives in each destination, committed with
    the data, and never depends on Dagster's event log; production deployments use PostgreSQL
    storage, which this leaves untouched. ``INCSYNC_SQLITE_SYNC=normal|full`` chooses SQLite's
    safer modes. Uses SQLAlchemy's public ``connect`` event.
    """
    global _TUNED
    mode = os.environ.get(SQLITE_SYNC_ENV_VAR, "off").lower()
    if mode not in _SYNC_MODES:
        raise ConfigError("environment", [f'{SQLITE_SYNC_ENV_VAR}: "{mode}" must be one of {", ".join(_SYNC_MODES)}'])
    if _TUNED or mode == "full":
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA synchronous={mode.upper()}")
            cursor.close()

    _TUNED = True

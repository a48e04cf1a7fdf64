"""Where a dagster.yaml written before the split of ``orchestration`` finds the batching event log: such a file
names ``incsync.orchestration.dagster_compat``, and ``dagster-daemon`` and ``dagster dev`` read it as it is
(the CLI rewrites it: ``operations.instance``). The class lives in ``incsync.operations.dagster_compat``."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "BatchingSqliteEventLogStorage":
        raise AttributeError(name)
    from incsync.operations import dagster_compat

    return dagster_compat.BatchingSqliteEventLogStorage

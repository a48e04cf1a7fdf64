"""Transfers whose process died: found, marked ORPHANED, their staging removed (faults item 7).

Every run that executes a transfer carries ``incsync/process`` (host, pid and the process's start time,
so a reused pid is not taken for the run) and a heartbeat tag it refreshes while it runs. The CLI and
the worker tag a run when they launch it; the asset body tags every run, daemon-launched ones included.
``reap`` marks a run still in progress ORPHANED when its process is gone (this host) or its heartbeat
is older than ``STALE_AFTER`` (another host); it runs at every ``incsync transfers`` and
``incsync transfer``, and every 30 s in the Dagster daemon (the ``incsync_reaper`` sensor of
``orchestration.triggers``). The run failure releases the run's concurrency slots (the tag limits count
in-progress runs only); a destination's own lease never outlives its holder (PostgreSQL's advisory lock
is per transaction, the other locks are ``flock``s the OS drops), and staging the dead process held is
removed.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from incsync.config.tags import HEARTBEAT_TAG, PROCESS_TAG
from incsync.operations.dagster_compat import report_run_orphaned

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30
STALE_AFTER = 100  # seconds without a heartbeat before a run of another host counts as dead
IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the command name may hold spaces


def process_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '?'}"


@dataclass(frozen=True)
class Liveness:
    alive: bool | None  # None: cannot tell (another host without a heartbeat)
    why: str


def liveness(tags: dict[str, str], *, now: float | None = None) -> Liveness:
    """Whether the process running a run with these tags is still there."""
    tag = tags.get(PROCESS_TAG)
    if tag:
        host, pid, ticks = ([*tag.rsplit(":", 2), "", ""])[:3]
        if host == socket.gethostname() and pid.isdigit():
            current = _start_ticks(int(pid))
            if current is None:
                return Liveness(False, f"its process {pid} on {host} is gone")
            if ticks not in ("?", current):
                return Liveness(False, f"its process {pid} on {host} is gone (the pid now belongs to another process)")
            return Liveness(True, f"process {pid} on {host} runs")
    beat = tags.get(HEARTBEAT_TAG)
    if beat is None:
        return Liveness(None, "no heartbeat")
    age = (time.time() if now is None else now) - float(beat)
    if age > STALE_AFTER:
        return Liveness(False, f"its last heartbeat ({tag or 'unknown process'}) is {age:.0f} s old")
    return Liveness(True, f"heartbeat {age:.0f} s ago")


def mark_running(instance: dg.DagsterInstance, run_id: str) -> None:
    """Tag the run with this process and a heartbeat the process refreshes until the run ends."""
    instance.add_run_tags(run_id, {PROCESS_TAG: process_tag(), HEARTBEAT_TAG: f"{time.time():.0f}"})
    threading.Thread(target=_beat, args=(instance, run_id), name=f"incsync-heartbeat-{run_id[:8]}", daemon=True).start()


def _beat(instance: dg.DagsterInstance, run_id: str) -> None:
    while True:
        time.sleep(HEARTBEAT_SECONDS)
        try:
            run = instance.get_run_by_id(run_id)
            if run is None or run.status not in IN_PROGRESS:
                return
            instance.add_run_tags(run_id, {HEARTBEAT_TAG: f"{time.time():.0f}"})
        except Exception:
            log.debug("heartbeat of run %s failed", run_id, exc_info=True)


def reap(instance: dg.DagsterInstance, *, staging_root: Path | None = None, now: float | None = None) -> list[str]:
    """Mark in-progress runs whose process died as failed (ORPHANED); remove abandoned staging.

    Returns the run ids marked.
    """
    marked = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=IN_PROGRESS)):
        run = record.dagster_run
        state = liveness(run.tags, now=now)
        if state.alive is not False:
            continue
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.status not in IN_PROGRESS:
            continue  # it ended while we looked
        message = (f"incsync: transfer run {run.run_id} was still {run.status.value} but {state.why}; "
                   "marked ORPHANED. What it committed stays committed, nothing else was published: run it again.")
        report_run_orphaned(instance, current, message)
        log.warning("%s", message)
        marked.append(run.run_id)
    if staging_root is not None:
        remove_abandoned_staging(staging_root)
    return marked


def remove_abandoned_staging(root: Path) -> list[Path]:
    """Remove staging folders no live transfer holds, and their lock files, with or without the folder."""
    from incsync.core.transfer_id import TRANSFER_ID_PATTERN
    from incsync.staging.folders import remove_abandoned

    # <model>-<recipient>-<id> and <model>-fanout-<id>
    return remove_abandoned(root, re.compile(rf".+-{TRANSFER_ID_PATTERN}"))  # type: ignore[return-value]  # a local root gives local paths

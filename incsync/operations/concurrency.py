"""Run concurrency limits for dagster.yaml, generated from the configuration's
``max_concurrent_transfers`` (per source, per destination) plus one transfer per (model, destination)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from incsync.config.model import IncsyncConfig
from incsync.config.tags import DESTINATION_SLOTS_TAG, MODEL_DESTINATION_TAG, SHARD_TAG, SOURCE_SLOTS_TAG
from incsync.errors import ConfigError
from incsync.operations.dagster_compat import event_log_storage_config
from incsync.operations.dagster_compat.postgres import postgres_storage_sections
from incsync.operations.instance import storage_problems, with_working_scheme


def tag_concurrency_limits(config: IncsyncConfig) -> list[dict[str, Any]]:
    """Limits on the tags every incsync run carries (dagster counts each (key, value) apart)."""
    limits: list[dict[str, Any]] = [
        {"key": MODEL_DESTINATION_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
        {"key": SHARD_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
    ]
    # One entry per distinct limit (the run's tag key names its limit), however many sources and
    # destinations share it: the instance config stays small at 10,000 destinations.
    for template, entries in ((SOURCE_SLOTS_TAG, config.sources), (DESTINATION_SLOTS_TAG, config.destinations)):
        for limit in sorted({e.max_concurrent_transfers for e in entries}):
            limits.append({"key": template.format(limit=limit), "value": {"applyLimitPerUniqueValue": True}, "limit": limit})
    return limits


MAX_CONCURRENT_RUNS = 10
# The run queue is looked at every second, not Dagster's 5: a cycle of many runs of which few run at
# once hands over a slot once per run, and each hand-over waits half the interval on average.
DEQUEUE_INTERVAL_SECONDS = 1
# A schedule tick creates its runs (an execution plan from the code server, the run, its planned
# partitions) with this many threads, not one after the other: one thread made a tick of many runs slow.
SUBMIT_WORKERS = 4


def default_max_concurrent_runs(config: IncsyncConfig, cpus: int | None = None) -> int:
    """Runs at once when the base file sets none: 10, or one per CPU where every run starts its own
    local Spark (``local[*]`` takes all CPUs; more JVMs than cores can starve the daemon's own code
    server past Dagster's start-up limit)."""
    master = config.spark.get("spark.master", "local[*]")
    if "spark.remote" in config.spark or not master.startswith("local"):
        return MAX_CONCURRENT_RUNS
    return max(1, min(MAX_CONCURRENT_RUNS, cpus or os.cpu_count() or 1))


def dagster_yaml(config: IncsyncConfig, base: Path | None = None, dagster_home: Path | None = None) -> str:
    """``base`` (e.g. the repository's dagster.yaml) with its run tag limits replaced by the generated ones.

    Unless ``base`` sets its own, the run queue is checked every second and schedule and sensor ticks
    submit their runs from threads (see the constants above).

    With ``dagster_home`` (the instance folder the file is for) and no storage of its own, the file
    also selects incsync's batching SQLite event log for that instance. PostgreSQL storage must name
    the psycopg2 driver (``instance``): any other URL form is refused here, not at the first run.
    """
    doc: dict[str, Any] = (yaml.safe_load(base.read_text()) if base and base.exists() else None) or {}
    problems = storage_problems(doc)
    if problems:
        raise ConfigError(str(base), problems)
    with_working_scheme(doc)
    runs = doc.setdefault("concurrency", {}).setdefault("runs", {})
    runs.setdefault("max_concurrent_runs", default_max_concurrent_runs(config))
    runs["tag_concurrency_limits"] = tag_concurrency_limits(config)
    doc.setdefault("run_coordinator", {
        "module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator",
        "config": {"dequeue_interval_seconds": DEQUEUE_INTERVAL_SECONDS},
    })
    for daemon in ("schedules", "sensors"):
        doc.setdefault(daemon, {"use_threads": True, "num_workers": SUBMIT_WORKERS, "num_submit_workers": SUBMIT_WORKERS})
    if dagster_home is not None and not {"storage", "event_log_storage"} & doc.keys():
        doc["event_log_storage"] = event_log_storage_config(dagster_home)
    postgres = (doc.get("storage") or {}).get("postgres") if isinstance(doc.get("storage"), dict) else None
    if postgres is not None and len(doc["storage"]) == 1:  # the same database, incsync's compact event log
        del doc["storage"]
        doc.update(postgres_storage_sections(postgres))
    return yaml.safe_dump(doc, sort_keys=False)

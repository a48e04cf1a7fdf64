"""Run concurrency limits for dagster.yaml, generated from the configuration's
``max_concurrent_transfers`` (per source, per destination) plus one transfer per (model, destination)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from incsync.automation.tags import DESTINATION_TAG, MODEL_DESTINATION_TAG, SHARD_TAG, SOURCE_TAG
from incsync.config import IncsyncConfig
from incsync.dagster_compat import event_log_storage_config


def tag_concurrency_limits(config: IncsyncConfig) -> list[dict[str, Any]]:
    """Limits on the tags every incsync run carries (dagster counts each (key, value) apart)."""
    limits: list[dict[str, Any]] = [
        {"key": MODEL_DESTINATION_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
        {"key": SHARD_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
    ]
    limits += [{"key": SOURCE_TAG, "value": s.name, "limit": s.max_concurrent_transfers} for s in config.sources]
    limits += [{"key": DESTINATION_TAG, "value": d.name, "limit": d.max_concurrent_transfers} for d in config.destinations]
    return limits


def dagster_yaml(config: IncsyncConfig, base: Path | None = None, dagster_home: Path | None = None) -> str:
    """``base`` (e.g. the repository's dagster.yaml) with its run tag limits replaced by the generated ones.

    With ``dagster_home`` (the instance folder the file is for) and no storage of its own, the file
    also selects incsync's batching SQLite event log for that instance.
    """
    doc: dict[str, Any] = yaml.safe_load(base.read_text()) if base and base.exists() else {}
    runs = doc.setdefault("concurrency", {}).setdefault("runs", {})
    runs.setdefault("max_concurrent_runs", 10)
    runs["tag_concurrency_limits"] = tag_concurrency_limits(config)
    if dagster_home is not None and not {"storage", "event_log_storage"} & doc.keys():
        doc["event_log_storage"] = event_log_storage_config(dagster_home)
    return yaml.safe_dump(doc, sort_keys=False)

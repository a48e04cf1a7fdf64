"""One launch path: (model, recipients, windows, mode, tags) -> Dagster runs, for the CLI, the worker,
the schedules and the sensor alike (docs/design.md#batched-launches).

A run covers a *box* of partitions: a contiguous range of recipients (in the order the instance
registered them) × a contiguous range of windows, at most ``recipients_per_run`` recipients. Inside
the run the IO manager coalesces each recipient's windows into one read and fans the recipients out
over one query. A run of one recipient carries that recipient's tags (destination concurrency keys);
a run of several carries the model's, the shard's and the tags all its recipients share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.tags import (
    FULL_REFRESH_TAG,
    MODE_TAG,
    MODEL_TAG,
    SHARD_TAG,
    SOURCE_SLOTS_TAG,
    SOURCE_TAG,
    transfer_run_tags,
    user_run_tags,
)
from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, model_asset_key, partition_key


@dataclass(frozen=True)
class RunSpec:
    """One Dagster run: ``recipients`` × windows ``first_window`` .. ``last_window`` of ``model``."""

    model: ModelConfig
    recipients: tuple[str, ...]
    first_window: str
    last_window: str
    tags: dict[str, str] = field(default_factory=dict)
    run_key: str | None = None

    @property
    def single_partition(self) -> dg.MultiPartitionKey | None:
        if len(self.recipients) == 1 and self.first_window == self.last_window:
            return partition_key(self.first_window, self.recipients[0])
        return None

    @property
    def range_tags(self) -> dict[str, str]:
        return {
            ASSET_PARTITION_RANGE_START_TAG: str(partition_key(self.first_window, self.recipients[0])),
            ASSET_PARTITION_RANGE_END_TAG: str(partition_key(self.last_window, self.recipients[-1])),
        }

    @property
    def partitions(self) -> int:
        return len(self.recipients)

    def run_request(self) -> dg.RunRequest:
        key = self.single_partition
        tags = dict(self.tags) if key is not None else {**self.tags, **self.range_tags}
        return dg.RunRequest(
            # The job named after the model (``assets.model_job``): the run is listed as ``orders``, not
            # ``__ASSET_JOB`` or ``__anonymous_asset_job_...``.
            job_name=self.model.model_name,
            run_key=self.run_key, asset_selection=[model_asset_key(self.model)], tags=tags,
            **({"partition_key": key} if key is not None else {}),
        )


def shards(selected: Sequence[str], registered: Sequence[str], size: int) -> list[list[str]]:
    """Split ``selected`` recipients into runs of at most ``size`` that are contiguous in the instance's
    registration order (a run's recipient range holds every recipient registered between its ends)."""
    wanted = set(selected)
    out: list[list[str]] = []
    current: list[str] = []
    for rid in registered:
        if rid in wanted and len(current) < size:
            current.append(rid)
            continue
        if current:
            out.append(current)
        current = [rid] if rid in wanted else []
    if current:
        out.append(current)
    return out


def run_specs(
    config: IncsyncConfig,
    model: ModelConfig,
    recipients: Sequence[RecipientConfig],
    *,
    windows: dict[str, tuple[str, str]],
    registered: Sequence[str],
    mode: str,
    full_refresh: bool = False,
    user_tags: dict[str, str] | None = None,
    run_key_prefix: str | None = None,
) -> list[RunSpec]:
    """Runs covering ``windows[recipient_id] = (first, last)`` for every recipient, batched.

    Recipients with the same window range share runs, ``config.recipients_per_run`` at most per run;
    recipients not in ``registered`` are left out (register them first, see ``register``).
    """
    by_id = {r.id: r for r in recipients}
    groups: dict[tuple[str, str], list[str]] = {}
    for rid in by_id:
        if rid in windows:
            groups.setdefault(windows[rid], []).append(rid)
    extra = {**({FULL_REFRESH_TAG: "true"} if full_refresh else {}), **(user_tags or {})}
    specs: list[RunSpec] = []
    for (first, last), ids in groups.items():
        for index, shard in enumerate(shards(ids, registered, config.recipients_per_run)):
            members = [by_id[r] for r in shard]
            tags = (
                transfer_run_tags(config, model, members[0], mode=mode) if len(members) == 1
                else shard_run_tags(config, model, members, mode=mode, shard=f"{model.model_name}:{first}:{index}")
            )
            key = None if run_key_prefix is None else f"{run_key_prefix}:{model.model_name}:{first}:{shard[0]}..{shard[-1]}"
            specs.append(RunSpec(model, tuple(shard), first, last, {**tags, **extra}, key))
    return specs


def shard_run_tags(
    config: IncsyncConfig, model: ModelConfig, members: Sequence[RecipientConfig], *, mode: str, shard: str
) -> dict[str, str]:
    """Tags of a run of several recipients: the model's, its source's limit, the shard's (one run of a
    shard at a time) and the recipient tags every member has. Its destinations' limits hold through
    their leases."""
    common = dict(members[0].tags)
    for member in members[1:]:
        common = {k: v for k, v in common.items() if member.tags.get(k) == v}
    return {
        MODEL_TAG: model.model_name,
        SOURCE_TAG: model.source,
        SOURCE_SLOTS_TAG.format(limit=config.source(model.source).max_concurrent_transfers): model.source,
        SHARD_TAG: shard,
        MODE_TAG: mode,
        **user_run_tags(common),
    }


def register(instance: dg.DagsterInstance, recipient_ids: Sequence[str]) -> list[str]:
    """Add the recipients the instance does not know yet; return the registration order."""
    registered = instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
    known = set(registered)
    missing = [r for r in dict.fromkeys(recipient_ids) if r not in known]
    if missing:
        instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, missing)
        registered = instance.get_dynamic_partitions(RECIPIENTS_PARTITIONS)
    return list(registered)

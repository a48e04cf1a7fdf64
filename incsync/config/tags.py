"""Run tags: every tag key incsync sets or reads on a run, defined once, and the validation of user tags."""

from __future__ import annotations

from collections.abc import Iterable

from incsync.config.base import ID_PATTERN, ID_RE
from incsync.config.errors import TagError
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig

MODE_TAG = "incsync/mode"  # incremental | backfill | manual: which windows (the asset reads it)
FULL_REFRESH_TAG = "incsync/full_refresh"
ALLOW_MASS_DELETE_TAG = "incsync/allow_mass_delete"  # --allow-mass-delete: one run may delete past max_delete_fraction
ERROR_TAG = "incsync/error"  # the first line of a failed run's error, so listing runs reads no events
BLAMED_TAG = "incsync/blamed"  # provider | recipient | unknown: whose a failed run is (core.blame)
BLAME_REASON_TAG = "incsync/blame_reason"  # its one-line reason, naming the fix
PROCESS_TAG = "incsync/process"  # host:pid of the process running the run (liveness)
HEARTBEAT_TAG = "incsync/heartbeat"
MODEL_TAG = "incsync/model"
RECIPIENT_TAG = "incsync/recipient"
SOURCE_TAG = "incsync/source"
DESTINATION_TAG = "incsync/destination"
MODEL_DESTINATION_TAG = "incsync/model_destination"
# The limit a run's source / destination allows, in the tag's key, its name as the value: dagster.yaml
# holds one "per unique value" limit per distinct max_concurrent_transfers, not one entry per
# destination (10,000 destinations made an instance config Dagster could no longer pass to its code
# server on the command line).
SOURCE_SLOTS_TAG = "incsync/source-slots-{limit}"
DESTINATION_SLOTS_TAG = "incsync/destination-slots-{limit}"
# A run of several recipients: "<model>:<first window>:<index>"; dagster.yaml runs one per value at a time.
SHARD_TAG = "incsync/shard"
USER_TAG_PREFIX = "incsync/tag/"
INCREMENTAL = "incremental"
BACKFILL = "backfill"
FULL_REFRESH_MODE = "full_refresh"  # a full refresh is reported as one, whichever windows its MODE_TAG names


def reported_mode(mode: str | None, *, full_refresh: bool) -> str | None:
    """The mode a transfer is reported with (`incsync transfer --json`, `incsync transfers`, the transfer log):
    ``full_refresh`` for a full refresh, its lines' transfer type; else its windows' mode."""
    return FULL_REFRESH_MODE if full_refresh else mode


def validate_tag(key: str, value: str) -> tuple[str, str]:
    from incsync.core.limits import tag_length_problem

    if problem := tag_length_problem(key, value):
        raise TagError(problem)
    for what, text in (("key", key), ("value", value)):
        if not ID_RE.match(text):
            raise TagError(
                f'tag {key}={value}: {what} "{text}" is invalid; tag keys and values must match {ID_PATTERN} '
                "(letters, digits, _ and - only)"
            )
    return key, value


def parse_tags(pairs: Iterable[str]) -> dict[str, str]:
    """``["tier=gold", ...]`` as given on the command line -> ``{"tier": "gold"}``, validated."""
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise TagError(f'tag "{pair}" must be written key=value (e.g. --tag tier=gold)')
        validate_tag(key, value)
        tags[key] = value
    return tags


def user_run_tags(tags: dict[str, str]) -> dict[str, str]:
    """User tags as run tags, under their own prefix so they never clash with Dagster's or ours."""
    return {USER_TAG_PREFIX + k: v for k, v in (validate_tag(k, v) for k, v in tags.items())}


def model_destination(model: ModelConfig, recipient: RecipientConfig) -> str:
    return f"{model.model_name}@{recipient.destination}"


def transfer_run_tags(config: IncsyncConfig, model: ModelConfig, recipient: RecipientConfig, *, mode: str) -> dict[str, str]:
    """Tags of a run of ``model`` for ``recipient``; dagster.yaml limits concurrency on several of them."""
    return {
        MODEL_TAG: model.model_name,
        RECIPIENT_TAG: recipient.id,
        SOURCE_TAG: model.source,
        DESTINATION_TAG: recipient.destination,
        MODEL_DESTINATION_TAG: model_destination(model, recipient),
        SOURCE_SLOTS_TAG.format(limit=config.source(model.source).max_concurrent_transfers): model.source,
        DESTINATION_SLOTS_TAG.format(limit=config.destination(recipient.destination).max_concurrent_transfers):
            recipient.destination,
        MODE_TAG: mode,
        **user_run_tags(recipient.tags),
    }

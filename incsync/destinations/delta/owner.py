"""A Delta table's owner stamp: a table property, each change logged in its commit's metadata."""

from __future__ import annotations

import json
from collections.abc import Iterator

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.destinations.delta.state import RECORD_KEY
from incsync.destinations.delta.state import app_id as delta_app_id
from incsync.destinations.ownership import OWNER_PROPERTY, OWNERSHIP_LOG_KEY, Owner, check_owner, now_iso, refuse_unstamped
from incsync.destinations.records import TransferRecord


def stamp(dt: DeltaTable, owner: Owner, *, previous: Owner | None, reason: str) -> None:
    """Set the owner property in a commit of its own that logs the move."""
    log = {"owner": owner.to_json(), "previous": previous.to_json() if previous else None, "reason": reason, "at": now_iso()}
    dt.alter.set_table_properties(
        {OWNER_PROPERTY: owner.to_json()}, raise_if_not_exists=False,
        commit_properties=CommitProperties(custom_metadata={OWNERSHIP_LOG_KEY: json.dumps(log)}, max_commit_retries=0),
    )


def stamped_owner(dt: DeltaTable | None) -> Owner | None:
    raw = dt.metadata().configuration.get(OWNER_PROPERTY) if dt is not None else None
    return None if raw is None else Owner.from_json(raw)


def claim(dt: DeltaTable, me: Owner, *, model: ModelConfig, recipient: RecipientConfig, transfer_id: str, where: str) -> bool:
    """Refuse a table of another recipient; stamp an unstamped one whose log names only ``me``.

    Returns True when it committed the adoption stamp (the caller must reload the table).
    """
    owner = stamped_owner(dt)
    if owner is not None:
        check_owner(owner, me, where=where)
        return False
    named = {r.recipient_id for r in _records(dt.history())}
    if dt.transaction_version(delta_app_id(model.model_name, recipient.id)) is not None:
        named.add(recipient.id)
    others = sorted(named - {recipient.id})
    if others or recipient.id not in named:
        raise refuse_unstamped(me, where=where, others=others)
    try:
        stamp(dt, me, previous=None, reason=f"adopted by transfer {transfer_id}: its log names only {recipient.id}")
    except CommitFailedError:
        pass  # another writer committed first: the caller reloads and checks again
    return True


def _records(history: list[dict]) -> Iterator[TransferRecord]:
    for commit in history:
        raw = commit.get(RECORD_KEY)
        if raw is not None:
            yield TransferRecord.from_json(raw if isinstance(raw, str) else json.dumps(raw))

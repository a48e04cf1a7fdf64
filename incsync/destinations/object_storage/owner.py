"""An object-storage prefix's owner stamp: a JSON file in the prefix, with the history of its moves."""

from __future__ import annotations

import json

from incsync.destinations.ownership import OWNER_FILE, Owner, now_iso
from incsync.storage.files import Store


def _stamp_path(model: str, recipient: str) -> str:
    return f"{model}/recipient={recipient}/{OWNER_FILE}"


def read_stamp(store: Store, model: str, recipient: str) -> Owner | None:
    try:
        return Owner.from_json(store.read_text(_stamp_path(model, recipient)))
    except FileNotFoundError:
        return None


def write_stamp(store: Store, owner: Owner, *, previous: Owner | None, reason: str) -> None:
    """Stamp ``owner``, appending the move to the stamp's history."""
    path = _stamp_path(owner.model, owner.recipient)
    try:
        history = json.loads(store.read_text(path)).get("history", [])
    except FileNotFoundError:
        history = []
    history.append({"owner": json.loads(owner.to_json()), "previous": json.loads(previous.to_json()) if previous else None,
                    "reason": reason, "at": now_iso()})
    store.write(path, json.dumps({**json.loads(owner.to_json()), "history": history}, indent=1))

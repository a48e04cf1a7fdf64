"""What the recipient's page does: test a destination with the secret just typed (the kind's own ``check`` and
``check_vacant``), save it (the vault entry, the destinations table row, the recipient enabled, the link used and
an audit row), and read the recipient's status back from its destination's transfer log."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from psycopg import sql
from pydantic import SecretStr, TypeAdapter

from incsync.config.destinations import DESTINATION_MODELS, DestinationConfig
from incsync.config.model import IncsyncConfig
from incsync.config.products import receives
from incsync.config.secrets import SecretRef
from incsync.destinations.registry import build_destination
from incsync.errors import ConfigError, IncsyncError
from incsync.onboarding import links
from incsync.onboarding.errors import OnboardingError
from incsync.onboarding.forms import Entered
from incsync.onboarding.links import Link, now_utc
from incsync.onboarding.place import Place
from incsync.onboarding.store import Store, audit, column_value, ident
from incsync.secrets.stores import VaultStore, held

_DESTINATION: TypeAdapter[Any] = TypeAdapter(DestinationConfig)


def destination_name(recipient: str) -> str:
    """The destination a recipient connects is named after it."""
    return recipient


def vault_entry(recipient: str) -> str:
    return f"onboard.{recipient}"


def secret_ref(recipient: str) -> str:
    return f"vault:{vault_entry(recipient)}"


def _config(place: Place, recipient: str, entered: Entered) -> Any:
    model = DESTINATION_MODELS[entered.kind]
    mapping: dict[str, Any] = {"name": destination_name(recipient), "kind": entered.kind, **entered.fields}
    if model.secret_field and entered.secret:
        mapping[model.secret_field] = SecretRef("vault", vault_entry(recipient), place.vault)
    return _DESTINATION.validate_python(mapping)


# What a recipient does about a failed test, by what the driver said (the kinds' own checks name their fixes).
FIXES = (
    (re.compile(r"password authentication failed|role \S+ does not exist|access denied for user|authentication", re.I),
     "check the user and password: the user must exist on your server and may log in from incsync's address"),
    (re.compile(r"database \S+ does not exist|unknown database", re.I), "name a database that exists on your server"),
    (re.compile(r"connection refused|could not connect|timeout|timed out|name or service not known|"
                r"could not translate host|no route to host|can't connect", re.I),
     "check the host and port, and that your server accepts connections from incsync's address (firewall, "
     "pg_hba.conf or bind-address)"),
    (re.compile(r"not a PostgreSQL connection string", re.I),
     "write it as postgresql://user:password@host:5432/database"),
)


def _said(exc: BaseException, secret: str | None) -> str:
    text = "; ".join(exc.problems) if isinstance(exc, ConfigError) else str(exc)
    text = " ".join(text.split())
    fix = next((fix for pattern, fix in FIXES if pattern.search(text)), None)
    text = f"{text}. To fix: {fix}." if fix else text
    return text.replace(secret, "***") if secret else text


def test(place: Place, recipient: str, entered: Entered) -> str | None:
    """What keeps the destination from working, with its fix; None when it can be reached and is free (or the
    recipient's own). The secret is lent to this thread for the check, stored nowhere."""
    config = _config(place, recipient, entered)
    destination = build_destination(config)
    lend = (held(SecretRef("vault", vault_entry(recipient)), SecretStr(entered.secret)) if entered.secret
            else contextlib.nullcontext())
    try:
        with lend:
            try:
                destination.check()
                destination.check_vacant(recipient=recipient)
            finally:
                with contextlib.suppress(Exception):  # a pool opened for settings that may not be kept
                    destination.close()
    except IncsyncError as exc:
        return _said(exc, entered.secret)
    except Exception as exc:  # noqa: BLE001 - a driver's own error: said (without the secret) for the recipient to fix
        return _said(exc, entered.secret) or type(exc).__name__
    return None


def save(place: Place, link: Link, entered: Entered) -> None:
    """Store the destination the recipient tested: the vault entry (its secret), its destinations table row, the
    recipient enabled on it, the link used, an audit row; all or nothing, once per link."""
    recipient = link.recipient
    model = DESTINATION_MODELS[entered.kind]
    name = destination_name(recipient)
    store = Store(place)
    with store.connect() as conn:
        if not links.mark_used(conn, place, link.id, now=now_utc()):
            raise OnboardingError("this link was used or withdrawn meanwhile")
        cols = store.columns(conn, place.destinations_table)
        secret = secret_ref(recipient) if model.secret_field and entered.secret else None
        if entered.secret:
            VaultStore(place.vault).set(vault_entry(recipient), entered.secret)
        conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s").format(ident(place.destinations_table)), [name])
        conn.execute(sql.SQL("INSERT INTO {} (name, kind, fields, secret) VALUES (%s, %s, %s, %s)").format(
            ident(place.destinations_table)), [name, entered.kind, column_value(cols.get("fields", "jsonb"), entered.fields),
                                              secret])
        conn.execute(sql.SQL("UPDATE {} SET destination = %s, enabled = true WHERE id = %s").format(
            ident(place.recipients_table)), [name, recipient])
        audit(conn, place, actor=f"recipient:{recipient}", action="connect", recipient=recipient,
              detail={"link": link.id, "destination": name, "kind": entered.kind, "fields": entered.fields,
                      "secret": secret})


@dataclass(frozen=True)
class ModelStatus:
    """One model as the recipient's status shows it."""

    model: str
    last_transfer: str  # when, UTC; "-" before the first
    data_up_to: str  # the high watermark: how fresh the copy is
    rows: int | None  # rows in the copy now
    problem: str | None = None


def status(config: IncsyncConfig, recipient: str) -> list[ModelStatus]:
    """Each model the recipient receives, read from its destination (its own transfer log and copy)."""
    found = next((r for r in config.recipients if r.id == recipient), None)
    if found is None:
        return []
    destination = build_destination(config.destination(found.destination))
    out = []
    for model in config.models:
        if not receives(config, found, model.model_name):
            continue
        try:
            state = destination.read_state(model=model, recipient=found)
            record = state.last_transfer
            rows = destination.current_rows(model=model, recipient=found).num_rows if record else None
        except IncsyncError as exc:
            out.append(ModelStatus(model.model_name, "-", "-", None, _said(exc, None)))
            continue
        when = "-" if record is None else _utc(record.committed_at)
        up_to = "-" if state.high_watermark is None else state.high_watermark.strftime("%Y-%m-%d %H:%M:%SZ")
        out.append(ModelStatus(model.model_name, when, up_to, rows))
    return out


def _utc(text: str) -> str:
    try:
        return datetime.fromisoformat(text).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except ValueError:
        return text


__all__ = ["ModelStatus", "destination_name", "save", "secret_ref", "status", "test", "vault_entry"]

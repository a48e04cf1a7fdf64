"""Whose copy a destination table or prefix holds: the owner stamp every publish checks
(docs/design.md#ownership).

A Delta table carries the stamp as the table property ``incsync.owner``; a PostgreSQL schema in
``<schema>._incsync_owners`` (one row per stamp, the newest row per model is the owner, earlier rows are
the log of moves); an object-storage recipient folder in ``<model>/recipient=<id>/_incsync_owner.json``.
A publish for any other recipient (or the same id with another tenant value) fails before writing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from incsync.errors import OwnershipError

if TYPE_CHECKING:
    import psycopg

    from incsync.config.model import ModelConfig, RecipientConfig

OWNER_PROPERTY = "incsync.owner"
OWNERSHIP_LOG_KEY = "incsync.ownership"
OWNERS_TABLE = "_incsync_owners"
OWNER_FILE = "_incsync_owner.json"
METADATA_KEY = "destination_owner"

_OWNERS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    seq bigserial PRIMARY KEY,
    model_name text NOT NULL,
    recipient_id text NOT NULL,
    tenant text NOT NULL,
    stamped_at timestamptz NOT NULL DEFAULT now(),
    reason text NOT NULL,
    moved text
)"""


@dataclass(frozen=True)
class Owner:
    """The recipient (and its tenant value) a table or prefix of one model belongs to."""

    recipient: str
    tenant: str
    model: str
    # Set by `transfer-ownership`: the new owner's last transfer id then ("" for none). While it is still
    # the last transfer, the copy holds the previous owner's rows, so the next transfer re-syncs it.
    moved: str | None = None

    def to_json(self) -> str:
        data = asdict(self)
        if self.moved is None:
            data.pop("moved")
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Owner:
        data = json.loads(text)
        return cls(recipient=data["recipient"], tenant=data["tenant"], model=data["model"], moved=data.get("moved"))

    def moved_reason(self, last_transfer_id: str | None) -> str | None:
        """Why the copy must be re-synced after a move, until the new owner's first transfer since it."""
        if self.moved is None or self.moved != (last_transfer_id or ""):
            return None
        return f"ownership moved to {self} by `incsync transfer-ownership`; the copy is re-synced from its start"

    def __str__(self) -> str:
        return f"recipient {self.recipient} (tenant {self.tenant})"


def owner_of(model: ModelConfig, recipient: RecipientConfig) -> Owner:
    return Owner(recipient=recipient.id, tenant=recipient.id_in_provider_system, model=model.model_name)


def _fix(intruder: Owner) -> str:
    return (
        f"Give recipient {intruder.recipient} a destination of its own; if this copy really moves to it, run "
        f"`incsync transfer-ownership {intruder.model} --to {intruder.recipient}` first"
    )


def check_owner(stamp: Owner | None, intruder: Owner, *, where: str) -> None:
    """Raise OwnershipError unless ``stamp`` is ``intruder`` (None: not stamped yet, the caller decides)."""
    if stamp is None or (stamp.recipient, stamp.tenant) == (intruder.recipient, intruder.tenant):
        return
    raise OwnershipError(
        f"model {intruder.model}: {where} belongs to {stamp}; refusing to publish {intruder} there, nothing was "
        f"written. {_fix(intruder)}."
    )


def refuse_unstamped(intruder: Owner, *, where: str, others: list[str]) -> OwnershipError:
    """The error for a table with no stamp whose transfer log does not name ``intruder`` alone."""
    named = f"names recipient(s) {', '.join(sorted(others))}" if others else f"does not name recipient {intruder.recipient}"
    return OwnershipError(
        f"model {intruder.model}: {where} has no incsync owner stamp and its transfer log {named}; refusing to "
        f"publish {intruder} there, nothing was written. {_fix(intruder)}."
    )


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# PostgreSQL: the owner rows live in the schema and are written in the publish transaction.


def pg_owner(conn: psycopg.Connection, schema: str, model: str) -> Owner | None:
    from psycopg import sql

    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [sql.Identifier(schema, OWNERS_TABLE).as_string(conn)]).fetchone()
    if not exists or not exists[0]:
        return None
    row = conn.execute(
        sql.SQL("SELECT recipient_id, tenant, moved FROM {} WHERE model_name = %s ORDER BY seq DESC LIMIT 1").format(
            sql.Identifier(schema, OWNERS_TABLE)
        ),
        [model],
    ).fetchone()
    return None if row is None else Owner(recipient=row[0], tenant=row[1], model=model, moved=row[2])


def pg_stamp(conn: psycopg.Connection, schema: str, owner: Owner, *, reason: str) -> None:
    from psycopg import sql

    table = sql.Identifier(schema, OWNERS_TABLE)
    conn.execute(sql.SQL(_OWNERS_DDL).format(table=table))
    conn.execute(
        sql.SQL("INSERT INTO {} (model_name, recipient_id, tenant, reason, moved) VALUES (%s, %s, %s, %s, %s)").format(table),
        [owner.model, owner.recipient, owner.tenant, reason, owner.moved],
    )


def pg_claim(
    conn: psycopg.Connection, schema: str, me: Owner, *, stamp: Owner | None, where: str, table_exists: Callable[[], bool],
    recipients_logged: Callable[[], list[str]], transfer_id: str,
) -> None:
    """Check (and on a first transfer or an adoption, write) the owner of ``schema.model``, inside the
    publish transaction, given its newest ``stamp`` read in that transaction (``pg_owner``); only an
    unstamped table costs a look at the table and at the recipients its transfer log names."""
    if stamp is not None:
        check_owner(stamp, me, where=where)
        return
    logged = recipients_logged()
    others = sorted({r for r in logged if r != me.recipient})
    if others or (me.recipient not in logged and table_exists()):
        raise refuse_unstamped(me, where=where, others=others)
    reason = f"adopted by transfer {transfer_id}: its log names only {me.recipient}" if logged else f"first transfer {transfer_id}"
    pg_stamp(conn, schema, me, reason=reason)

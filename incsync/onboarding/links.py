"""Onboarding links: a token bound to one recipient, stored only as its SHA-256 digest, expiring, single-use
(one destination submitted; afterwards it shows the recipient its status) and revocable. A new link revokes the
recipient's earlier ones: one live link per recipient."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg import sql

from incsync.onboarding.place import Place
from incsync.onboarding.store import ident

TOKEN_PREFIX = "incsync_ol_"  # recognisable by secret scanners
MAX_TOKEN_LENGTH = 200


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Link:
    """What the store keeps of a link: never its token."""

    id: str
    recipient: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    revoked_at: datetime | None = None

    def state(self, now: datetime) -> str:
        """``revoked``, ``expired``, ``used`` (a destination was submitted: it shows the status) or ``live``."""
        if self.revoked_at is not None:
            return "revoked"
        if now >= self.expires_at:
            return "expired"
        return "used" if self.used_at is not None else "live"


@dataclass(frozen=True)
class Issued:
    """A link just issued: the only moment its token exists in clear."""

    token: str = field(repr=False)
    link: Link


_COLUMNS = "id, recipient, created_by, created_at, expires_at, used_at, revoked_at"


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def issue(conn: psycopg.Connection, place: Place, recipient: str, *, by: str, now: datetime) -> tuple[Issued, list[str]]:
    """A new link for ``recipient``, and the ids of its earlier links this revokes."""
    revoked = revoke(conn, place, recipient, now=now)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 random bits
    link = Link(id=f"ol_{secrets.token_hex(6)}", recipient=recipient, created_by=by, created_at=now,
                expires_at=now + timedelta(hours=place.settings.link_lifetime_hours))
    conn.execute(sql.SQL("INSERT INTO {} (id, recipient, digest, created_by, created_at, expires_at) VALUES "
                         "(%s, %s, %s, %s, %s, %s)").format(ident(place.links_table)),
                 [link.id, recipient, digest(token), by, link.created_at, link.expires_at])
    return Issued(token, link), revoked


def revoke(conn: psycopg.Connection, place: Place, recipient: str, *, now: datetime) -> list[str]:
    """Revoke ``recipient``'s unrevoked links; their ids."""
    rows = conn.execute(sql.SQL("UPDATE {} SET revoked_at = %s WHERE recipient = %s AND revoked_at IS NULL "
                                "RETURNING id").format(ident(place.links_table)), [now, recipient]).fetchall()
    return sorted(r for (r,) in rows)


def find(conn: psycopg.Connection, place: Place, token: str) -> Link | None:
    """The link ``token`` is (whatever its state), or None."""
    if not token or len(token) > MAX_TOKEN_LENGTH or not token.startswith(TOKEN_PREFIX):
        return None
    row = conn.execute(sql.SQL(f"SELECT {_COLUMNS} FROM {{}} WHERE digest = %s").format(ident(place.links_table)),
                       [digest(token)]).fetchone()
    return Link(*row) if row else None


def mark_used(conn: psycopg.Connection, place: Place, link_id: str, *, now: datetime) -> bool:
    """Mark a live link used, unless another request did first (single use); whether this call did."""
    done = conn.execute(sql.SQL("UPDATE {} SET used_at = %s WHERE id = %s AND used_at IS NULL AND revoked_at IS NULL "
                                "AND expires_at > %s").format(ident(place.links_table)), [now, link_id, now])
    return done.rowcount == 1


def links_of(conn: psycopg.Connection, place: Place, recipient: str | None = None) -> list[Link]:
    query = sql.SQL(f"SELECT {_COLUMNS} FROM {{}} WHERE %s::text IS NULL OR recipient = %s ORDER BY recipient, "
                    "created_at").format(ident(place.links_table))
    return [Link(*row) for row in conn.execute(query, [recipient, recipient]).fetchall()]

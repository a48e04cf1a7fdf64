"""Bearer tokens as a provider manages them: one live token per recipient, stored only as its SHA-256 digest,
expiring, rotated with an overlap (the old token keeps working until a set time) and revoked at once.

The store is one SQLite file (``sharing.token_store``, readable by the provider only): every server process on
it sees a revocation on its next request. It also keeps the key that signs file URLs, unless the
``signing_key_env`` variable supplies one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from incsync.sharing.errors import SharingError

TOKEN_PREFIX = "incsync_st_"  # recognisable by secret scanners
MAX_TOKEN_LENGTH = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    recipient TEXT NOT NULL,
    digest TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX IF NOT EXISTS tokens_by_recipient ON tokens (recipient);
CREATE TABLE IF NOT EXISTS keys (name TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """What the store keeps of one token: never the token itself."""

    id: str
    recipient: str
    created_at: float
    expires_at: float
    revoked_at: float | None = None

    def state(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "live" if now < self.expires_at else "expired"


@dataclass(frozen=True)
class Minted:
    """A token just minted: the only moment the token exists in clear, to be written into a profile."""

    token: str = field(repr=False)
    record: TokenRecord


class TokenStore:
    """The tokens of every recipient in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # the provider's alone, before any byte is in it
        with self._connect() as conn:
            conn.executescript(_SCHEMA)
            conn.execute("PRAGMA journal_mode=WAL")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def create(self, recipient: str, *, lifetime_seconds: float, now: float | None = None) -> Minted:
        """A first token for ``recipient``; refused while it holds a live one (rotate it instead)."""
        now = time.time() if now is None else now
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            if self._live(conn, recipient, now):
                conn.execute("ROLLBACK")
                raise SharingError(f"recipient {recipient} already holds a live token; `incsync share rotate {recipient}` "
                                   f"replaces it, `incsync share revoke {recipient}` ends it")
            minted = self._mint(conn, recipient, now, lifetime_seconds)
            conn.execute("COMMIT")
        return minted

    def rotate(self, recipient: str, *, lifetime_seconds: float, overlap_seconds: float,
               now: float | None = None) -> tuple[Minted, list[TokenRecord]]:
        """A new token for ``recipient``; its live tokens stay valid ``overlap_seconds`` longer at most. Returns the
        new token and the old ones as they now stand."""
        now = time.time() if now is None else now
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            old = self._live(conn, recipient, now)
            if not old:
                conn.execute("ROLLBACK")
                raise SharingError(f"recipient {recipient} holds no live token to rotate; `incsync share create {recipient}` "
                                   "mints its first")
            until = now + overlap_seconds
            conn.executemany("UPDATE tokens SET expires_at = MIN(expires_at, ?) WHERE id = ?", [(until, r.id) for r in old])
            minted = self._mint(conn, recipient, now, lifetime_seconds)
            conn.execute("COMMIT")
        return minted, [TokenRecord(r.id, r.recipient, r.created_at, min(r.expires_at, until)) for r in old]

    def revoke(self, recipient: str, *, token_id: str | None = None, now: float | None = None) -> list[TokenRecord]:
        """Revoke ``recipient``'s unrevoked tokens (or only ``token_id``) at once; the tokens revoked."""
        now = time.time() if now is None else now
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            rows = [r for r in self._records(conn, recipient) if r.revoked_at is None and token_id in (None, r.id)]
            if token_id is not None and not rows:
                conn.execute("ROLLBACK")
                raise SharingError(f"recipient {recipient} holds no unrevoked token {token_id}; "
                                   f"`incsync share list {recipient}` shows its tokens")
            conn.executemany("UPDATE tokens SET revoked_at = ? WHERE id = ?", [(now, r.id) for r in rows])
            conn.execute("COMMIT")
        return [TokenRecord(r.id, r.recipient, r.created_at, r.expires_at, now) for r in rows]

    def tokens(self, recipient: str | None = None) -> list[TokenRecord]:
        with self._connect() as conn:
            return self._records(conn, recipient)

    def authenticate(self, token: str, *, now: float | None = None) -> TokenRecord | None:
        """The live token ``token`` is, or None (unknown, expired or revoked)."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        now = time.time() if now is None else now
        with self._connect() as conn:
            row = conn.execute("SELECT id, recipient, created_at, expires_at, revoked_at FROM tokens WHERE digest = ?",
                               (digest(token),)).fetchone()
        record = TokenRecord(*row) if row else None
        return record if record is not None and record.state(now) == "live" else None

    def is_live(self, token_id: str, *, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        with self._connect() as conn:
            row = conn.execute("SELECT id, recipient, created_at, expires_at, revoked_at FROM tokens WHERE id = ?",
                               (token_id,)).fetchone()
        return row is not None and TokenRecord(*row).state(now) == "live"

    def signing_key(self) -> bytes:
        """The file-URL signing key of every server on this store, made once."""
        with self._connect() as conn:
            conn.execute("INSERT OR IGNORE INTO keys (name, value) VALUES ('file_urls', ?)", (secrets.token_bytes(32),))
            return bytes(conn.execute("SELECT value FROM keys WHERE name = 'file_urls'").fetchone()[0])

    def _mint(self, conn: sqlite3.Connection, recipient: str, now: float, lifetime: float) -> Minted:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 random bits
        record = TokenRecord(id=f"tok_{secrets.token_hex(6)}", recipient=recipient, created_at=now, expires_at=now + lifetime)
        conn.execute("INSERT INTO tokens (id, recipient, digest, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                     (record.id, recipient, digest(token), record.created_at, record.expires_at))
        return Minted(token=token, record=record)

    def _live(self, conn: sqlite3.Connection, recipient: str, now: float) -> list[TokenRecord]:
        return [r for r in self._records(conn, recipient) if r.state(now) == "live"]

    @staticmethod
    def _records(conn: sqlite3.Connection, recipient: str | None) -> list[TokenRecord]:
        query = "SELECT id, recipient, created_at, expires_at, revoked_at FROM tokens"
        rows = conn.execute(query + " WHERE recipient = ? ORDER BY created_at", (recipient,)) if recipient is not None \
            else conn.execute(query + " ORDER BY recipient, created_at")
        return [TokenRecord(*row) for row in rows.fetchall()]

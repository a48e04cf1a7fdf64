"""Onboarding's tables in the provider's PostgreSQL, reached through the ``recipients_from`` source: the
recipients and destinations tables it writes rows into, its links (each stored as its SHA-256 digest, never the
link's token), the key the page's CSRF tokens are made with, and its audit rows (who, what, when; never a secret)."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from incsync.core.vendor_sql import postgres_target
from incsync.onboarding.errors import OnboardingError
from incsync.onboarding.place import Place

_OWN = """
CREATE TABLE IF NOT EXISTS {links} (
    id text PRIMARY KEY, recipient text NOT NULL, digest text NOT NULL UNIQUE, created_by text NOT NULL,
    created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, used_at timestamptz, revoked_at timestamptz
);
CREATE TABLE IF NOT EXISTS {keys} (name text PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE IF NOT EXISTS {audit} (
    id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), actor text NOT NULL, action text NOT NULL,
    recipient text, detail jsonb NOT NULL DEFAULT '{{}}'::jsonb
);
"""


def ident(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))


class Store:
    """Connections to onboarding's database, one short transaction per change."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._ready = False

    @contextlib.contextmanager
    def connect(self) -> Iterator[psycopg.Connection]:
        source = self.place.source
        target = postgres_target(source.jdbc_url)
        if target is None:
            raise OnboardingError(f"recipients_from.source: {source.name}'s jdbc_url must be "
                                  "jdbc:postgresql://host[:port]/database")
        secret = source.password()
        password = secret.get_secret_value() if secret else None
        try:
            with psycopg.connect(**target, user=source.user, password=password,  # type: ignore[arg-type]  # host, port, dbname
                                 connect_timeout=10, application_name="incsync-onboarding") as conn:
                if not self._ready:
                    conn.execute(sql.SQL(_OWN).format(links=ident(self.place.links_table), keys=ident(self.place.keys_table),
                                                      audit=ident(self.place.audit_table)))
                    self._ready = True
                yield conn
        except psycopg.Error as exc:
            text = " ".join(str(exc).split()) or type(exc).__name__
            text = text.replace(password, "***") if password else text
            raise OnboardingError(f"onboarding: cannot use {self.place.recipients_table} through source {source.name}: "
                                  f"{text}") from None

    def key(self, name: str) -> bytes:
        """The random key ``name`` every server process on these tables shares (the page's CSRF key), made once."""
        with self.connect() as conn:
            conn.execute(sql.SQL("INSERT INTO {} (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING").format(
                ident(self.place.keys_table)), [name, secrets.token_bytes(32)])
            row = conn.execute(sql.SQL("SELECT value FROM {} WHERE name = %s").format(ident(self.place.keys_table)),
                               [name]).fetchone()
        assert row is not None
        return bytes(row[0])

    def columns(self, conn: psycopg.Connection, table: str) -> dict[str, str]:
        """Column -> its type (``udt_name``: text, _text, jsonb, bool...)."""
        schema, _, name = table.rpartition(".")
        rows = conn.execute("SELECT column_name, udt_name FROM information_schema.columns WHERE table_name = %s "
                            "AND table_schema = COALESCE(NULLIF(%s, ''), current_schema()) ORDER BY ordinal_position",
                            [name, schema]).fetchall()
        return dict(rows)


def column_value(udt: str, value: Any) -> Any:
    """``value`` (a list or a mapping) as a column of type ``udt`` holds it: an array, JSON, or JSON text."""
    if value is None:
        return None
    if udt.startswith("_"):
        return list(value)
    if udt in ("json", "jsonb"):
        return Jsonb(value)
    return json.dumps(value)


def audit(conn: psycopg.Connection, place: Place, *, actor: str, action: str, recipient: str | None,
          detail: dict[str, Any]) -> None:
    """One audit row, in the caller's transaction: the change and its audit commit together."""
    conn.execute(sql.SQL("INSERT INTO {} (actor, action, recipient, detail) VALUES (%s, %s, %s, %s)").format(
        ident(place.audit_table)), [actor, action, recipient, Jsonb(detail)])

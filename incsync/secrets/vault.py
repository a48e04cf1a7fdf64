"""The vault's table: one row per entry (``name``, ``sealed``, ``key_id``, ``updated_at``), in PostgreSQL through
a source's credentials or in a SQLite file. It holds sealed values only; sealing and opening is ``keys``."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from incsync.config.secrets import VaultPlace
from incsync.secrets.errors import VaultError


@dataclass(frozen=True)
class Entry:
    """What ``incsync secrets list`` shows of an entry: never its value."""

    name: str
    key_id: str
    updated_at: datetime


def _utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return datetime.fromisoformat(str(value)).astimezone(timezone.utc)


class VaultTable:
    """The sealed entries of the vault at ``place``."""

    def __init__(self, place: VaultPlace) -> None:
        self.place = place
        self.postgres = place.source is not None

    def _problem(self, what: str, detail: str) -> VaultError:
        return VaultError(f"vault: cannot {what} {self.place.shown}: {detail}")

    @contextlib.contextmanager
    def _pg(self, *, write: bool) -> Iterator[Any]:
        import psycopg

        from incsync.core.vendor_sql import postgres_target

        source = self.place.source
        assert source is not None
        target = postgres_target(source.jdbc_url)
        if target is None:
            raise VaultError(f"vault.source: {source.name}'s jdbc_url must be jdbc:postgresql://host[:port]/database")
        secret = source.password()
        password = secret.get_secret_value() if secret else None
        try:
            with psycopg.connect(**target, user=source.user, password=password, connect_timeout=10, autocommit=not write,
                                 application_name="incsync",
                                 options="" if write else "-c default_transaction_read_only=on") as conn:
                yield conn
        except psycopg.Error as exc:
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise self._problem("write" if write else "read", text.replace(password, "***") if password else text) from None

    @contextlib.contextmanager
    def _sqlite(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        path = self.place.path
        assert path is not None
        try:
            if write:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, timeout=30)
            else:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error as exc:
            raise self._problem("write" if write else "read", f"{exc} (`incsync secrets set` creates it)") from None
        try:
            with conn:
                yield conn
        except sqlite3.Error as exc:
            raise self._problem("write" if write else "read", str(exc)) from None
        finally:
            conn.close()

    def _table(self) -> Any:
        if not self.postgres:
            return f'"{self.place.table}"'
        from psycopg import sql

        return sql.Identifier(*self.place.table.split("."))

    def _run(self, statement: str, params: tuple[Any, ...] = (), *, write: bool = False) -> tuple[list[tuple[Any, ...]], int]:
        """``statement`` with ``{table}`` for the table and ``?`` for parameters; its rows and its row count."""
        if self.postgres:
            from psycopg import sql

            query = sql.SQL(statement.replace("?", "%s")).format(table=self._table())
            with self._pg(write=write) as conn:
                if write:
                    self._create(conn)
                cursor = conn.execute(query, params)
                return (cursor.fetchall() if cursor.description else []), cursor.rowcount
        with self._sqlite(write=write) as conn:
            if write:
                self._create(conn)
            cursor = conn.execute(statement.format(table=self._table()), params)
            return cursor.fetchall(), cursor.rowcount

    def _create(self, conn: Any) -> None:
        if self.postgres:
            from psycopg import sql

            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, sealed text NOT NULL, "
                                 "key_id text NOT NULL, updated_at timestamptz NOT NULL)").format(self._table()))
        else:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table()} (name TEXT PRIMARY KEY, sealed TEXT NOT NULL, "
                         "key_id TEXT NOT NULL, updated_at TEXT NOT NULL)")

    def sealed(self) -> dict[str, str]:
        """Every entry's sealed value, by name."""
        rows, _ = self._run("SELECT name, sealed FROM {table}")
        return dict(rows)

    def put(self, name: str, sealed: str, *, key_id: str) -> None:
        now = datetime.now(timezone.utc)
        self._run("INSERT INTO {table} (name, sealed, key_id, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (name) DO "
                  "UPDATE SET sealed = excluded.sealed, key_id = excluded.key_id, updated_at = excluded.updated_at",
                  (name, sealed, key_id, now if self.postgres else now.isoformat()), write=True)

    def replace(self, name: str, old: str, new: str, *, key_id: str) -> bool:
        """Swap ``old`` for ``new`` unless the entry changed meanwhile (a concurrent ``set`` wins)."""
        _, count = self._run("UPDATE {table} SET sealed = ?, key_id = ? WHERE name = ? AND sealed = ?",
                             (new, key_id, name, old), write=True)
        return count == 1

    def delete(self, name: str) -> bool:
        _, count = self._run("DELETE FROM {table} WHERE name = ?", (name,), write=True)
        return count == 1

    def entries(self) -> list[Entry]:
        rows, _ = self._run("SELECT name, key_id, updated_at FROM {table} ORDER BY name")
        return [Entry(name, key, _utc(when)) for name, key, when in rows]

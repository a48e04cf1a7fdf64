"""Verify's destination half, hashed by the PostgreSQL server: per-bucket fingerprints in one query, and the
rows of the buckets that differ, typed as the source side's staged rows are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.canonical import Fingerprints, Kind, kind_from_pg, sql_hash, sql_key_bucket, sql_text
from incsync.destinations.records import DELETED_AT

if TYPE_CHECKING:
    from incsync.destinations.postgres.destination import PostgresDestination


def _ident(column: str) -> str:
    return sql.Identifier(column).as_string(None)


class PostgresRowHashes:
    """One recipient's copy of one model in ``<schema>.<model>``, soft-deleted rows and ``skip``ped keys left out."""

    def __init__(self, destination: PostgresDestination, *, model: ModelConfig, recipient: RecipientConfig) -> None:
        self.destination, self.model, self.recipient = destination, model, recipient
        self.table = sql.Identifier(destination.schema, model.model_name).as_string(None)
        self.skip: list[str] = []

    def _stored(self) -> dict[str, str]:
        return self.destination.stored_schema(model=self.model, recipient=self.recipient) or {}

    def columns(self) -> dict[str, Kind]:
        """Column -> kind (empty when the table does not exist yet), soft-delete stamp left out."""
        return {c: kind_from_pg(t) for c, t in self._stored().items() if c != DELETED_AT}

    def row_estimate(self) -> int:
        if not self._stored():
            return 0
        with self.destination.connect() as conn:
            return int(conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    def _where_live(self, cols: dict[str, str], kinds: dict[str, Kind] | None = None) -> str:
        terms = [f'"{DELETED_AT}" IS NULL'] if DELETED_AT in cols else []
        if self.skip and kinds:
            key = sql_text("postgres", [(_ident(c), kinds[c]) for c in self.model.primary_key])
            terms.append(f"NOT ({key} = ANY(%(skip)s))")
        return (" WHERE " + " AND ".join(terms)) if terms else ""

    def fingerprints(self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int,
                     native: bool = False) -> Fingerprints:
        out = Fingerprints()
        if not kinds:
            return out
        key = [(_ident(c), kinds[c]) for c in self.model.primary_key]
        row = sql_text("postgres", [(_ident(c), kinds[c]) for c in compared])
        live = self._where_live(self._stored(), kinds)
        query = (
            f"SELECT b, count(*), sum(h)::text FROM (SELECT {sql_key_bucket('postgres', key, buckets)} AS b, "
            f"{sql_hash('postgres', row, native=native)} AS h FROM {self.table}{live}) x WHERE b < {checked} GROUP BY b"
        )
        with self.destination.connect() as conn:
            for b, n, s in conn.execute(query, {"skip": self.skip} if self.skip else None).fetchall():
                out.add(int(b), int(n), int(s))
        return out

    def rows(self, kinds: dict[str, Kind], *, buckets: int, which: list[int]) -> list[dict[str, Any]]:
        """The rows of the buckets ``which`` as Python values."""
        if not kinds or not which:
            return []
        key = [(_ident(c), kinds[c]) for c in self.model.primary_key]
        live = self._where_live(self._stored(), kinds)
        cond = f"{sql_key_bucket('postgres', key, buckets)} IN ({', '.join(map(str, which))})"
        with self.destination.connect() as conn:
            cur = _infinity_as_text(conn.cursor())
            cur.execute(f"SELECT * FROM {self.table}{live}{' AND ' if live else ' WHERE '}{cond}",
                        {"skip": self.skip} if self.skip else None)
            names = [d.name for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _infinity_as_text(cursor: Any) -> Any:
    """Read PostgreSQL's 'infinity' / '-infinity' dates and timestamps as that text, as the source side's
    staged rows give them (``incsync.staging.infinity.python_rows``); psycopg would refuse them."""
    from psycopg.types.datetime import DateLoader, TimestampLoader, TimestamptzLoader

    for name, base in (("date", DateLoader), ("timestamp", TimestampLoader), ("timestamptz", TimestamptzLoader)):
        cursor.adapters.register_loader(name, _infinite(base))
    return cursor


def _infinite(base: type) -> type:
    class Infinite(base):  # type: ignore[misc, valid-type]  # a loader class made per base at run time
        def load(self, data: Any) -> Any:
            text = bytes(data)
            return text.decode() if text in (b"infinity", b"-infinity") else super().load(data)

    return Infinite

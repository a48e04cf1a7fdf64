"""The destination's half of verify: what a reader sees, per bucket.

PostgreSQL computes its fingerprints in SQL; Delta tables and object storage (through the manifest
reader, latest row per key) are read into Arrow and hashed by DataFusion. Rows stamped
``_incsync_deleted_at`` (soft deletes) are not part of the copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.destinations.base import Destination
from incsync.destinations.readers import current_rows
from incsync.core.canonical import MASK64, Kind, arrow_hashes, arrow_key_buckets, arrow_text, kind_from_arrow, kind_from_pg
from incsync.core.canonical import sql_hash, sql_key_bucket, sql_text
from incsync.integrity.source_side import Fingerprints

DELETED_AT = "_incsync_deleted_at"


class DestinationSide:
    """One recipient's copy of one model."""

    def __init__(self, destination: Destination, *, model: ModelConfig, recipient: RecipientConfig):
        self.destination, self.model, self.recipient = destination, model, recipient
        self._table: pa.Table | None = None
        self.skip: list[str] = []  # canonical key texts left out (the source's pending keys)
        self._buckets: np.ndarray | None = None

    def columns(self) -> dict[str, Kind]:
        """Column -> kind (empty when the table does not exist yet), soft-delete stamp left out."""
        if self.destination.kind == "postgres":
            with self.destination._connect() as conn:  # type: ignore[attr-defined]
                cols = self.destination._columns(conn, self.model.model_name) or {}  # type: ignore[attr-defined]
            return {c: kind_from_pg(t) for c, t in cols.items() if c != DELETED_AT}
        table = self.arrow()
        return {f.name: kind_from_arrow(f.type) for f in table.schema if f.name != DELETED_AT}

    def arrow(self) -> pa.Table:
        """Delta and object storage: every row a reader sees (latest version per key), soft-deleted ones left out."""
        if self._table is None:
            table = current_rows(self.destination, model=self.model, recipient=self.recipient)
            if DELETED_AT in table.schema.names:
                table = table.filter(pc.is_null(table[DELETED_AT]))
            self._table = table
            self.skip_keys(set(self.skip))
        return self._table

    def row_estimate(self) -> int:
        if self.destination.kind == "postgres":
            from psycopg import sql

            with self.destination._connect() as conn:  # type: ignore[attr-defined]
                if self.destination._columns(conn, self.model.model_name) is None:  # type: ignore[attr-defined]
                    return 0
                table = sql.Identifier(self.destination.schema, self.model.model_name)  # type: ignore[attr-defined]
                return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0])
        return self.arrow().num_rows

    def skip_keys(self, keys: set[str] | None) -> None:
        self.skip = sorted(keys or ())
        if self._table is not None and self.skip and self._table.num_rows:
            listed = pc.is_in(arrow_text(self._table, list(self.model.primary_key)), value_set=pa.array(self.skip, pa.string()))
            self._table, self._buckets = self._table.filter(pc.invert(listed)), None

    def _where_live(self, cols: dict[str, str], kinds: dict[str, Kind] | None = None) -> str:
        from psycopg import sql

        terms = [f'"{DELETED_AT}" IS NULL'] if DELETED_AT in cols else []
        if self.skip and kinds:
            key = sql_text("postgres", [(sql.Identifier(c).as_string(None), kinds[c]) for c in self.model.primary_key])
            terms.append(f"NOT ({key} = ANY(%(skip)s))")
        return (" WHERE " + " AND ".join(terms)) if terms else ""

    def fingerprints(self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int,
                     native: bool = False) -> Fingerprints:
        out = Fingerprints()
        if not kinds:
            return out
        if self.destination.kind == "postgres":
            for b, n, s in self._pg(kinds, compared, buckets=buckets, checked=checked, native=native):
                out.add(int(b), int(n), int(s))
            return out
        table = self.arrow()
        if table.num_rows == 0:
            return out
        bucket = self._arrow_buckets(buckets)
        hashes = arrow_hashes(arrow_text(table, compared))
        mask = bucket < checked
        bucket, hashes = bucket[mask], hashes[mask]
        order = np.argsort(bucket, kind="stable")
        bucket, hashes = bucket[order], hashes[order]
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]]) if len(bucket) else np.zeros(0, dtype=np.int64)
        if len(bucket):
            sums = np.add.reduceat(hashes, starts)  # uint64: wraps modulo 2**64, as the sources' sums are read
            counts = np.diff(np.r_[starts, len(bucket)])
            for b, n, s in zip(bucket[starts].tolist(), counts.tolist(), sums.tolist(), strict=True):
                out.add(int(b), int(n), int(s) & MASK64)
        return out

    def _arrow_buckets(self, buckets: int) -> np.ndarray:
        if self._buckets is None:
            self._buckets = arrow_key_buckets(self.arrow(), list(self.model.primary_key), buckets)
        return self._buckets

    def _pg(self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int, native: bool) -> list[tuple]:
        from psycopg import sql

        def ident(c: str) -> str:
            return sql.Identifier(c).as_string(None)

        table = sql.Identifier(self.destination.schema, self.model.model_name).as_string(None)  # type: ignore[attr-defined]
        key = [(ident(c), kinds[c]) for c in self.model.primary_key]
        row = sql_text("postgres", [(ident(c), kinds[c]) for c in compared])
        with self.destination._connect() as conn:  # type: ignore[attr-defined]
            cols = self.destination._columns(conn, self.model.model_name) or {}  # type: ignore[attr-defined]
            query = (
                f"SELECT b, count(*), sum(h)::text FROM (SELECT {sql_key_bucket('postgres', key, buckets)} AS b, "
                f"{sql_hash('postgres', row, native=native)} AS h FROM {table}{self._where_live(cols, kinds)}) x WHERE b < {checked} GROUP BY b"
            )
            return conn.execute(query, {"skip": self.skip} if self.skip else None).fetchall()

    def rows(self, kinds: dict[str, Kind], *, buckets: int, which: list[int]) -> list[dict[str, Any]]:
        """The rows of the buckets ``which`` as Python values."""
        if not kinds or not which:
            return []
        if self.destination.kind == "postgres":
            from psycopg import sql

            table = sql.Identifier(self.destination.schema, self.model.model_name).as_string(None)  # type: ignore[attr-defined]
            key = [(sql.Identifier(c).as_string(None), kinds[c]) for c in self.model.primary_key]
            with self.destination._connect() as conn:  # type: ignore[attr-defined]
                cols = self.destination._columns(conn, self.model.model_name) or {}  # type: ignore[attr-defined]
                live = self._where_live(cols, kinds)
                cond = f"{sql_key_bucket('postgres', key, buckets)} IN ({', '.join(map(str, which))})"
                cur = _infinity_as_text(conn.cursor())
                cur.execute(f"SELECT * FROM {table}{live}{' AND ' if live else ' WHERE '}{cond}", {"skip": self.skip} if self.skip else None)
                names = [d.name for d in cur.description]
                return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        table = self.arrow()
        if table.num_rows == 0:
            return []
        mask = np.isin(self._arrow_buckets(buckets), np.asarray(which, dtype=np.int64))
        return table.filter(pa.array(mask)).to_pylist()


def _infinity_as_text(cursor: Any) -> Any:
    """Read PostgreSQL's 'infinity' / '-infinity' dates and timestamps as that text, as the source side's
    staged rows give them (``incsync.staging.infinity.python_rows``); psycopg would refuse them."""
    from psycopg.types.datetime import DateLoader, TimestampLoader, TimestamptzLoader

    for name, base in (("date", DateLoader), ("timestamp", TimestampLoader), ("timestamptz", TimestamptzLoader)):
        cursor.adapters.register_loader(name, _infinite(base))
    return cursor


def _infinite(base: type) -> type:
    class Infinite(base):  # type: ignore[misc, valid-type]
        def load(self, data: Any) -> Any:
            text = bytes(data)
            return text.decode() if text in (b"infinity", b"-infinity") else super().load(data)

    return Infinite

"""The destination's half of verify: what a reader sees, per bucket.

A copy that hashes its own rows (``Destination.row_hashes``: PostgreSQL) computes its fingerprints in SQL;
every other is read into Arrow as its reader sees it (``current_rows``: an append log's latest row per
key) and hashed here. Rows stamped ``_incsync_deleted_at`` (soft deletes) are not part of the copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.canonical import MASK64, Fingerprints, Kind, arrow_hashes, arrow_key_buckets, arrow_text, kind_from_arrow
from incsync.destinations.base import DELETED_AT, Destination


class DestinationSide:
    """One recipient's copy of one model."""

    def __init__(self, destination: Destination, *, model: ModelConfig, recipient: RecipientConfig) -> None:
        self.destination, self.model, self.recipient = destination, model, recipient
        self.native = destination.row_hashes(model=model, recipient=recipient)
        self._table: pa.Table | None = None
        self.skip: list[str] = []  # canonical key texts left out (the source's pending keys)
        self._buckets: np.ndarray | None = None

    def columns(self) -> dict[str, Kind]:
        """Column -> kind (empty when the table does not exist yet), soft-delete stamp left out."""
        if self.native is not None:
            return self.native.columns()
        table = self.arrow()
        return {f.name: kind_from_arrow(f.type) for f in table.schema if f.name != DELETED_AT}

    def arrow(self) -> pa.Table:
        """Every row a reader sees (latest version per key), soft-deleted ones left out."""
        if self._table is None:
            table = self.destination.current_rows(model=self.model, recipient=self.recipient)
            if DELETED_AT in table.schema.names:
                table = table.filter(pc.is_null(table[DELETED_AT]))
            self._table = table
            self.skip_keys(set(self.skip))
        return self._table

    def row_estimate(self) -> int:
        if self.native is not None:
            return self.native.row_estimate()
        return self.arrow().num_rows

    def skip_keys(self, keys: set[str] | None) -> None:
        self.skip = sorted(keys or ())
        if self.native is not None:
            self.native.skip = self.skip
        if self._table is not None and self.skip and self._table.num_rows:
            listed = pc.is_in(arrow_text(self._table, list(self.model.primary_key)), value_set=pa.array(self.skip, pa.string()))
            self._table, self._buckets = self._table.filter(pc.invert(listed)), None

    def fingerprints(self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int,
                     native: bool = False) -> Fingerprints:
        if self.native is not None:
            return self.native.fingerprints(kinds, compared, buckets=buckets, checked=checked, native=native)
        out = Fingerprints()
        if not kinds:
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

    def rows(self, kinds: dict[str, Kind], *, buckets: int, which: list[int]) -> list[dict[str, Any]]:
        """The rows of the buckets ``which`` as Python values."""
        if self.native is not None:
            return self.native.rows(kinds, buckets=buckets, which=which)
        if not kinds or not which:
            return []
        table = self.arrow()
        if table.num_rows == 0:
            return []
        mask = np.isin(self._arrow_buckets(buckets), np.asarray(which, dtype=np.int64))
        return table.filter(pa.array(mask)).to_pylist()

"""Compact event text: the materialization events incsync stores itself (``events.MaterializationRows``), compressed
with Zstandard against a fixed dictionary of such events, and every reader of the event log expanding them again.
Private Dagster API (the ``event`` column of ``SqlEventLogStorageTable``), pinned by
``incsync_tests/operations/test_compact_events.py``.

A backfill of many recipients stores one event per (window, recipient) partition: ~1.5 KB of JSON whose text is
nearly the same in every event (the serializer's frame, the job, the step, the metadata's labels). Against a
dictionary of that text an event compresses to ~200 bytes, ~250 as text, where PostgreSQL would not compress it
at all (TOAST starts at 2 KB) and SQLite never does (docs/design.md#bookkeeping).

Only incsync's own event log storages write compact text (``BatchingSqliteEventLogStorage``,
``CompactPostgresEventLogStorage``): every process that opens such an instance, the webserver's and the daemon's
included, loads the storage from ``dagster.yaml`` and with it the reader (``install_reader``). Events Dagster
writes itself stay JSON; a value is expanded only when it carries ``MARK``, which JSON never starts with. An
instance whose ``dagster.yaml`` goes back to Dagster's own storage cannot read the compact rows:
``incsync expand-events`` rewrites them as JSON first (``expand_stored_events``, docs/operations.md).
"""

from __future__ import annotations

import base64
import threading
from typing import Any

MARK = "zs1:"  # Zstandard, dictionary V1 (``event_dictionary``), base64: a new dictionary gets a new mark
LEVEL = 3  # ~15 µs an event; higher levels gain a few bytes for several times the time
_MAX_EVENT_BYTES = 64 << 20

_local = threading.local()  # zstandard's (de)compressors are not safe to share between threads
_dictionary: Any = None
_lock = threading.Lock()


def _dict() -> Any:
    global _dictionary
    with _lock:
        if _dictionary is None:
            import zstandard

            from incsync.operations.dagster_compat.event_dictionary import V1

            d = zstandard.ZstdCompressionDict(V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            d.precompute_compress(level=LEVEL)
            _dictionary = d
        return _dictionary


def _compressor() -> Any:
    c = getattr(_local, "compressor", None)
    if c is None:
        import zstandard

        c = _local.compressor = zstandard.ZstdCompressor(
            dict_data=_dict(), level=LEVEL, write_content_size=True, write_checksum=False, write_dict_id=False)
    return c


def _decompressor() -> Any:
    d = getattr(_local, "decompressor", None)
    if d is None:
        import zstandard

        d = _local.decompressor = zstandard.ZstdDecompressor(dict_data=_dict())
    return d


def compact(text: str) -> str:
    """``text`` (an event's JSON) as compact text."""
    return MARK + base64.b64encode(_compressor().compress(text.encode())).decode("ascii")


def expand(value: Any) -> Any:
    """The event's JSON from a stored value: compact text expanded, anything else as it is."""
    if isinstance(value, str) and value.startswith(MARK):
        return _decompressor().decompress(base64.b64decode(value[len(MARK):]), max_output_size=_MAX_EVENT_BYTES).decode()
    return value


_installed = False


def install_reader() -> None:
    """Make every read of the event log's ``event`` column in this process expand compact text (idempotent).

    The column's type becomes a ``TypeDecorator`` over Dagster's ``Text`` that expands what it reads and binds
    what it writes unchanged: every query Dagster builds selects the column from this one table object, so
    each result passes through it. Installed before the storage runs its first query."""
    global _installed
    if _installed:
        return
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
    from sqlalchemy.types import Text, TypeDecorator

    class CompactEventText(TypeDecorator[str]):
        impl = Text
        cache_ok = True

        def process_result_value(self, value: Any, dialect: Any) -> Any:
            return expand(value)

    column = SqlEventLogStorageTable.c.event
    if type(column.type).__name__ != "CompactEventText":
        column.type = CompactEventText()
    _installed = True


def expand_stored_events(storage: Any, *, batch: int = 10_000, progress: Any = None) -> int:
    """Rewrite every compact row of ``storage``'s event log (the SQLite index shard, or dagster-postgres'
    ``event_logs``) as the JSON it stands for, in batches of ``batch`` rows, each batch its own transaction:
    what an instance needs before its dagster.yaml names Dagster's own event log again. Returns the rows
    rewritten; run again after an interruption, it goes on where it stopped."""
    from sqlalchemy import text

    select = text(f"SELECT id, event FROM event_logs WHERE event LIKE '{MARK}%' AND id > :after ORDER BY id LIMIT :n")
    update = text("UPDATE event_logs SET event = :event WHERE id = :id")
    done, after = 0, 0
    while True:
        with storage.index_transaction() as conn:  # the SQLite index shard; PostgreSQL's one table
            rows = conn.execute(select, {"after": after, "n": batch}).fetchall()
            if not rows:
                return done
            conn.execute(update, [{"id": row_id, "event": expand(value)} for row_id, value in rows])
        done += len(rows)
        after = rows[-1][0]
        if progress is not None:
            progress(done)

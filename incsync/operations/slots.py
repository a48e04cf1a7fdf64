"""Transfer slots: one transfer per (model, destination) and each source's / destination's
``max_concurrent_transfers``, whatever launched the run (the daemon's queue, ``incsync transfer``,
the worker, the UI's "materialize").

Dagster's run tag limits only hold back runs the daemon dequeues; a run executed in process by the
command line or the worker never passes the queue. So every run takes its slots where all of them
meet, the Dagster instance, before it reads anything:
- a PostgreSQL-backed instance: session advisory locks in that database (any host);
- a SQLite instance (one host by nature): ``flock`` on files in ``$DAGSTER_HOME/incsync-slots``.
Both are released by the operating system or the server when the process dies, so a killed transfer
never leaves a slot taken. A run takes its slots in one fixed order (model and destination, then
destination, then source; by name), so two runs never wait for each other; a run that has to wait
says which slot and who holds it, and waits like a queued run.

A run's slots live for one block, ``run_holding``'s, and have one owner: the IO manager's
``handle_output``, which enters it before it reads any destination's state and leaves it after the last
publish, so a run that fails anywhere in between (a read, a publish, the reporter) releases them on its
way out. The asset body before it only plans the run's transfers (plain values) and touches no
destination; nothing else takes or releases a run's slots.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from incsync.transfer.request import TransferPlan

POLL_SECONDS = 1.0


@dataclass(frozen=True, order=True)
class Slot:
    """``limit`` transfers at once may hold ``key``; ``what`` says it to a person."""

    rank: int
    key: str
    limit: int
    what: str


def run_slots(*, model: str, destinations: Sequence[Any], sources: Sequence[Any]) -> list[Slot]:
    """The slots of a run of ``model`` publishing to ``destinations`` and reading ``sources`` (each with
    ``name`` and ``max_concurrent_transfers``: a destination's is its effective limit), in the order every run takes them.

    A destination that takes one transfer at a time (the default) needs no (model, destination) slot of
    its own: a run of 256 recipients then holds 256 destination slots, not 512 locks.
    """
    slots = {Slot(0, f"model_destination:{model}@{d.name}", 1, f"model {model} → destination {d.name} (one transfer at a time)")
             for d in destinations if d.max_concurrent_transfers > 1}
    slots |= {destination_slot(d) for d in destinations}
    slots |= {Slot(2, f"source:{s.name}", s.max_concurrent_transfers,
                   f"source {s.name} (max_concurrent_transfers {s.max_concurrent_transfers})") for s in sources}
    return sorted(slots)


class Backend(Protocol):
    def try_take(self, key: str, index: int, holder: str) -> object | None: ...
    def holders(self, key: str, limit: int) -> list[str]: ...
    def release(self, handle: object) -> None: ...
    def close(self) -> None: ...


class FileSlots:
    """``flock`` on ``<root>/<key>.<index>.lock``: one host (a SQLite instance's)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, index: int) -> Path:
        return self.root / f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', key)}.{index}.lock"

    def try_take(self, key: str, index: int, holder: str) -> IO[str] | None:
        f = open(self._path(key, index), "a+")  # noqa: SIM115 - kept open while the slot is held
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return None
        f.seek(0)
        f.truncate()
        f.write(holder)
        f.flush()
        return f

    def holders(self, key: str, limit: int) -> list[str]:
        found = []
        for index in range(limit):
            try:
                found.append(self._path(key, index).read_text().strip())
            except FileNotFoundError:
                continue
        return [h for h in found if h]

    def release(self, handle: object) -> None:
        f: IO[str] = handle  # type: ignore[assignment]  # fcntl hands back the same file object
        f.seek(0)
        f.truncate()
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()

    def close(self) -> None:
        pass


class PostgresSlots:
    """Session advisory locks in the instance's PostgreSQL database; the holder is the session's
    ``application_name``."""

    def __init__(self, url: str, holder: str) -> None:
        import psycopg

        self.conn = psycopg.connect(re.sub(r"^postgresql\+\w+://", "postgresql://", url), autocommit=True,
                                    application_name=holder[:63])

    @staticmethod
    def _name(key: str, index: int) -> str:
        return f"incsync-slot:{key}:{index}"

    def try_take(self, key: str, index: int, holder: str) -> str | None:
        name = self._name(key, index)
        row = self.conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name]).fetchone()
        return name if row and row[0] else None

    def holders(self, key: str, limit: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = ANY(%s)",
            [[self._key(self._name(key, i)) for i in range(limit)]],
        ).fetchall()
        return [r[0] for r in rows]

    def _key(self, name: str) -> int:
        return self.conn.execute("SELECT hashtextextended(%s, 0)", [name]).fetchone()[0]  # type: ignore[index]  # the query always returns one row

    def release(self, handle: object) -> None:
        self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [handle])

    def close(self) -> None:
        self.conn.close()


def holder_name(run_id: str) -> str:
    return f"incsync run {run_id[:8]} (pid {os.getpid()} on {socket.gethostname()})"


@contextmanager
def holding(
    slots: Sequence[Slot], backend: Backend, *, holder: str, notify: Callable[[str], None], poll: float = POLL_SECONDS
) -> Iterator[None]:
    """Take every slot of ``slots`` (in order), waiting as long as needed; release them all on exit."""
    with ExitStack() as stack:
        stack.callback(backend.close)
        for slot in slots:
            waited_since = None
            while True:
                handle = next((h for i in range(slot.limit) if (h := backend.try_take(slot.key, i, holder)) is not None), None)
                if handle is not None:
                    stack.callback(backend.release, handle)
                    if waited_since is not None:
                        notify(f"{slot.what}: free after {time.monotonic() - waited_since:.1f} s; going on")
                    break
                if waited_since is None:
                    waited_since = time.monotonic()
                    held = ", ".join(backend.holders(slot.key, slot.limit)) or "another transfer"
                    notify(f"waiting: {slot.what} is taken by {held}; this transfer starts when it is free")
                time.sleep(poll)
        yield


@contextmanager
def holding_all(
    slot: Slot, backend: Backend, *, holder: str, notify: Callable[[str], None], poll: float = POLL_SECONDS
) -> Iterator[None]:
    """Take every one of ``slot``'s ``limit`` places (in order), so no transfer holds it meanwhile; a
    transfer holding one finishes first (it waits for nothing this holds), then this goes on. The
    caller closes ``backend``."""
    with ExitStack() as stack:
        for index in range(slot.limit):
            waited_since = None
            while (handle := backend.try_take(slot.key, index, holder)) is None:
                if waited_since is None:
                    waited_since = time.monotonic()
                    held = ", ".join(backend.holders(slot.key, slot.limit)) or "a transfer"
                    notify(f"waiting: {slot.what} is taken by {held}; maintenance starts when it is free")
                time.sleep(poll)
            stack.callback(backend.release, handle)
        yield


def destination_slot(destination: Any) -> Slot:
    """The slot every transfer publishing to ``destination`` takes one place of."""
    limit = destination.max_concurrent_transfers
    return Slot(1, f"destination:{destination.name}", limit,
                f"destination {destination.name} (max_concurrent_transfers {limit})")


def instance_backend(instance: Any, holder: str) -> Backend:
    """Where the slots of ``instance`` live: its PostgreSQL database, else files in its folder."""
    from incsync.operations.dagster_compat import instance_postgres_url

    url = instance_postgres_url(instance)
    if url:
        return PostgresSlots(url, holder)
    return FileSlots(Path(instance.root_directory) / "incsync-slots")


@contextmanager
def run_holding(plan: TransferPlan, *, run_id: str, instance: Any, log: Any) -> Iterator[None]:
    """Hold the slots of a run's transfers (one model's) for the length of the block: the IO manager
    reads each destination's state, opens the reads, stages and publishes inside it, and the block's end
    releases them however the run ends.

    A run that has to wait says so in its log and on stderr, where the command line's user sees it.
    """
    destinations = {t.destination.name: t.destination for t in plan.transfers}  # their effective limits
    source = getattr(plan.run.source, "config", None)
    if not destinations:
        yield
        return
    slots = run_slots(model=plan.run.model.model_name, destinations=list(destinations.values()),
                      sources=[] if source is None else [source])
    holder = holder_name(run_id)

    def notify(message: str) -> None:
        log.warning(message)
        print(f"incsync: {message}", file=sys.stderr, flush=True)

    with holding(slots, instance_backend(instance, holder), holder=holder, notify=notify):
        log.info("transfer slots taken: %s", ", ".join(s.key for s in slots))
        try:
            yield
        finally:
            log.info("transfer slots released")

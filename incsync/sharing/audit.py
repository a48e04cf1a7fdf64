"""The read audit: one row per read a recipient makes through a share (a Delta Sharing query or changes call, an
Iceberg scan plan): who read which table at which version, how many files and bytes its answer listed.

With an ``audit:`` section the rows land in the transfer log's warehouse as the table ``share_reads``, through
the destination protocol like the log's other tables (staged, committed with a transfer record, stamped for
the provider); the server buffers them and commits every ``FLUSH_SECONDS`` and when it stops, so a read costs
no commit of its own. A commit that fails (the warehouse down) keeps its rows for the next one, up to
``MAX_BUFFERED``. Without ``audit:`` each read is one line of the server's log (``incsync.sharing.reads``).
Neither ever holds a token: the token's id only.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Protocol

import pyarrow as pa

from incsync.config.jobs import AUDIT_GROUP
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.core.bounds import from_micros, to_micros
from incsync.core.fingerprint import model_fingerprint
from incsync.core.transfer_id import new_transfer_id
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, TransferRecord
from incsync.destinations.registry import build_destination

log = logging.getLogger(__name__)
reads_log = logging.getLogger("incsync.sharing.reads")

SHARE_READS = "share_reads"
# The transfer log's own source and owner (operations.audit's GROUP and OWNER): the provider's, no recipient's.
LOG_GROUP = AUDIT_GROUP
LOG_OWNER = "incsync_audit"
FLUSH_SECONDS = 5.0
MAX_BUFFERED = 100_000

SCHEMA = pa.schema([
    ("id", pa.string()),
    ("read_at", pa.timestamp("us", tz="UTC")),
    ("recipient", pa.string()),
    ("token_id", pa.string()),
    ("call", pa.string()),
    ("share", pa.string()),
    ("schema", pa.string()),
    ("table", pa.string()),
    ("model", pa.string()),
    ("version", pa.int64()),
    ("ending_version", pa.int64()),
    ("files", pa.int64()),
    ("bytes", pa.int64()),
])


@dataclass(frozen=True)
class Read:
    """One read: ``version`` the one answered (a query's pinned version, a range's start, a scan's snapshot id),
    ``ending_version`` a range's end (changes, streaming), else None."""

    recipient: str
    token_id: str
    call: str
    share: str
    schema: str
    table: str
    model: str
    version: int
    files: int
    bytes: int
    ending_version: int | None = None
    read_at: datetime | None = None
    id: str = ""


class ReadAudit(Protocol):
    def record(self, read: Read) -> None: ...

    def close(self) -> None: ...


def _stamped(read: Read) -> Read:
    return Read(**{**asdict(read), "read_at": read.read_at or datetime.now(timezone.utc), "id": read.id or uuid.uuid4().hex})


class LoggedReads:
    """Without ``audit:``: each read one line of the server's log."""

    def record(self, read: Read) -> None:
        versions = str(read.version) if read.ending_version is None else f"{read.version}-{read.ending_version}"
        reads_log.info("read %s recipient=%s token=%s table=%s.%s.%s version=%s files=%d bytes=%d", read.call, read.recipient,
                       read.token_id, read.share, read.schema, read.table, versions, read.files, read.bytes)

    def close(self) -> None:
        return None


def reads_model() -> ModelConfig:
    """``share_reads`` as the destinations see a model: keyed on the read's id, ordered by its time."""
    return ModelConfig(model_name=SHARE_READS, source=LOG_GROUP, source_table=SHARE_READS, columns=SCHEMA.names,
                       primary_key=["id"], last_modified_column="read_at", organization_column="recipient",
                       min_start_time_epoch=0)


def log_owner(config: IncsyncConfig) -> RecipientConfig:
    assert config.audit is not None
    return RecipientConfig(id=LOG_OWNER, id_in_provider_system=LOG_OWNER, destination=config.audit.destination)


def publish_reads(config: IncsyncConfig, reads: list[Read], *, staging_dir: str) -> None:
    """Append ``reads`` to ``share_reads`` in one commit (their ids are new: an append where the kind can)."""
    from incsync.staging.batch import stage_arrow
    from incsync.staging.folders import remove
    from incsync.storage.files import staging_root

    destination = build_destination(config.destination(log_owner(config).destination))
    model, owner = reads_model(), log_owner(config)
    state = destination.read_state(model=model, recipient=owner)
    last = None if state.last_transfer is None or state.reset_reason else state.last_transfer.high_watermark_micros
    stamps = [to_micros(r.read_at) for r in reads if r.read_at is not None]
    hw = max([*stamps, *([last] if last is not None else [])], default=None)
    lower = from_micros(min(stamps)) if stamps else from_micros(0)
    upper = datetime.now(timezone.utc)
    record = TransferRecord(
        transfer_id=new_transfer_id(), model_name=SHARE_READS, recipient_id=LOG_OWNER, window_start=lower.isoformat(),
        window_end=upper.isoformat(), lower_bound=lower.isoformat(), upper_bound=upper.isoformat(),
        rows_transferred=len(reads), delta_rows_transferred=len(reads), high_watermark_micros=hw,
        transfer_type=FULL_REFRESH if state.reset_reason else INCREMENTAL, fingerprint=model_fingerprint(model),
        lookback_seconds=0, committed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        extra={"full_refresh_reason": state.reset_reason} if state.reset_reason else {},
    )
    rows = [asdict(r) for r in reads]
    folder = staging_root(staging_dir, config.staging_storage_options) / f"incsync_share_reads-{record.transfer_id}"
    try:
        batch = stage_arrow(pa.Table.from_pylist(rows, schema=SCHEMA), folder)
        # A full refresh (a reset table) would replace the rows already logged: keep them, as the log's tables do.
        destination.publish(model=model, recipient=owner, batch=batch, record=record, expected=state,
                            new_keys=not state.reset_reason)
    finally:
        remove(folder)


class WarehouseReads:
    """With ``audit:``: reads buffered and appended to ``share_reads`` every ``flush_seconds`` by a thread of their
    own, and at ``close``. ``config`` gives the configuration of the moment (the server follows its file)."""

    def __init__(self, config: Callable[[], IncsyncConfig], *, staging_dir: Callable[[IncsyncConfig], str],
                 flush_seconds: float = FLUSH_SECONDS, max_buffered: int = MAX_BUFFERED) -> None:
        self._config = config
        self._staging_dir = staging_dir
        self._every = flush_seconds
        self._max = max_buffered
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._buffer: list[Read] = []
        self._dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="incsync-share-reads", daemon=True)
        self._thread.start()

    def record(self, read: Read) -> None:
        with self._lock:
            self._buffer.append(_stamped(read))
            if len(self._buffer) > self._max:
                self._buffer.pop(0)
                self._dropped += 1

    def flush(self) -> int:
        """Commit what is buffered now; the rows committed (0 when the commit failed: they stay buffered)."""
        with self._flushing:
            with self._lock:
                reads, self._buffer = self._buffer, []
                dropped, self._dropped = self._dropped, 0
            if dropped:
                log.error("the read audit dropped %d read(s): share_reads could not be written for too long", dropped)
            if not reads:
                return 0
            try:
                config = self._config()
                if config.audit is None:  # `audit:` removed while serving: the log takes the reads
                    for read in reads:
                        LoggedReads().record(read)
                    return 0
                publish_reads(config, reads, staging_dir=self._staging_dir(config))
            except Exception as exc:  # noqa: BLE001 - a warehouse down must not fail reads; keep the rows, try again
                log.error("the read audit could not append %d read(s) to %s (%s); trying again in %.0f s", len(reads),
                          SHARE_READS, exc, self._every)
                with self._lock:
                    self._buffer[:0] = reads
                return 0
            return len(reads)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.flush()

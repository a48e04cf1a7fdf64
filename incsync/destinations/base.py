"""The contract every destination kind implements, and what it declares about itself.

A kind declares its ``Capabilities`` once; the engine, the CLI and the conformance suite read those, never
the kind's name. Beyond publishing (``read_state``, ``publish``, ``maintain``), a kind says where a reader
finds a copy (``location``), reads it back as that reader sees it (``read_rows``, ``current_rows``), names
its stored columns (``stored_schema``) and compares them with a batch's (``drift``), checks that it can be reached
(``check``) and may hash its
rows itself for verify (``row_hashes``). Adding a kind is its config model, its folder, one line of the
registry and one row of the conformance suite's table (docs/architecture.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from incsync.config.destinations import DestinationConfig
from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.canonical import Fingerprints, Kind
from incsync.core.schema_change import SchemaDiff
from incsync.destinations.records import (
    DELETED_AT,
    FULL_REFRESH,
    INCREMENTAL,
    REPAIR,
    DestinationState,
    Removals,
    TransferRecord,
    hw_micros,
    reset_reason,
    table_state,
)

if TYPE_CHECKING:  # the staged batch (pyarrow's datasets, and the pandas they load) only where rows move
    import pyarrow as pa

    from incsync.destinations.maintenance import Maintained
    from incsync.destinations.ownership import Owner
    from incsync.staging.batch import StagedBatch


@dataclass(frozen=True)
class Capabilities:
    """What one destination kind can do. A capability it lacks has its reason in ``lacks``, for the docs
    and the conformance suite, which generates each contract's tests for the kinds that keep it."""

    # Rows are replaced per key with the last-modified tie-break; without: an append log readers reduce.
    upserts: bool = True
    # ``publish(new_keys=True)`` may append: the caller knows the table holds none of the batch's keys.
    appends_new_keys: bool = False
    # Holds PostgreSQL's ±infinity dates and timestamps as they are; other kinds refuse such a batch.
    infinities: bool = False
    # A view the recipient built on its table survives a full refresh.
    recipient_views: bool = True
    # One writer at a time (a file lock): ``max_concurrent_transfers`` is 1 whatever the config says.
    one_writer: bool = False
    # The SQL dialect in which the copy hashes its own rows for verify (``row_hashes``); None: read as Arrow.
    native_hashing: str | None = None
    # ``maintain`` compacts and vacuums something; without, a server reclaims space itself.
    maintained: bool = False
    # ``transfer_ownership`` moves a copy to another recipient.
    ownership_moves: bool = True
    lacks: tuple[tuple[str, str], ...] = ()  # (capability, why this kind lacks it)

    def why_not(self, capability: str) -> str | None:
        """None when the kind has ``capability``; else why not."""
        if getattr(self, capability):
            return None
        return dict(self.lacks).get(capability, f"{capability}: not supported")


@dataclass(frozen=True)
class Location:
    """Where a reader finds one recipient's copy of one model."""

    shown: str  # for people: a path, a relation, a file and schema (never a secret)
    path: str | None = None  # the copy's folder or table root when its files are a reader's way in; None: a database
    # The open table format of the copy at ``path`` (``DELTA_FORMAT``, ``ICEBERG_FORMAT``), which a sharing server
    # can serve; None: no such table.
    table_format: str | None = None
    # The storage options (secrets resolved) that read ``path`` when it is a URL: never shown, never logged.
    storage_options: dict[str, str] | None = field(default=None, repr=False, compare=False)


DELTA_FORMAT = "delta"  # Location.table_format of a Delta table
ICEBERG_FORMAT = "iceberg"  # Location.table_format of an Iceberg table


class RowHashes(Protocol):
    """A copy that hashes its own rows in SQL for verify (``Capabilities.native_hashing``): one recipient's
    copy of one model, soft-deleted rows left out, the keys in ``skip`` too."""

    skip: list[str]

    def columns(self) -> dict[str, Kind]: ...

    def row_estimate(self) -> int: ...

    def fingerprints(self, kinds: dict[str, Kind], compared: list[str], *, buckets: int, checked: int,
                     native: bool = False) -> Fingerprints: ...

    def rows(self, kinds: dict[str, Kind], *, buckets: int, which: list[int]) -> list[dict[str, Any]]: ...


class Destination(ABC):
    """One destination: recipients' copies of models in one store; every publish is all-or-nothing."""

    kind: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    config: DestinationConfig
    name: str

    @property
    def max_concurrent_transfers(self) -> int:
        """How many runs may publish here at once (per-destination run tag limit and slot)."""
        return 1 if self.capabilities.one_writer else self.config.max_concurrent_transfers

    @abstractmethod
    def read_state(self, *, model: ModelConfig, recipient: RecipientConfig) -> DestinationState:
        """The last committed transfer record, read back from the destination itself."""

    @abstractmethod
    def publish(
        self,
        *,
        model: ModelConfig,
        recipient: RecipientConfig,
        batch: StagedBatch,
        record: TransferRecord,
        expected: DestinationState,
        removals: Removals | None = None,
        new_keys: bool = False,
    ) -> dict[str, object]:
        """Make the batch and its record visible at once; return extra metadata (e.g. table version).

        A ``FULL_REFRESH`` record replaces the recipient's rows instead of merging into them; a ``REPAIR``
        record's rows replace the destination's rows of the same keys. ``removals`` go in the same commit.
        ``new_keys``: the table holds none of the batch's keys, so a kind that ``appends_new_keys`` may
        append; others ignore it. Raises LeaseError when the state moved since ``expected`` was read.
        """

    @abstractmethod
    def location(self, *, model: ModelConfig, recipient: RecipientConfig) -> Location:
        """Where a reader finds the recipient's copy of the model."""

    def metadata_location(self, *, model: ModelConfig, recipient: RecipientConfig) -> str | None:
        """For a copy whose catalog names its current metadata file (an Iceberg table): that file's location, which
        moves with every commit; None before the first transfer, and for every other kind (the default)."""
        return None

    @abstractmethod
    def read_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        """Every row a reader of the copy sees (an append log: every appended row); empty before the first transfer."""

    def current_rows(self, *, model: ModelConfig, recipient: RecipientConfig) -> pa.Table:
        """What the copy holds now: for an append log, each key's newest row."""
        return self.read_rows(model=model, recipient=recipient)

    def stored_schema(self, *, model: ModelConfig, recipient: RecipientConfig) -> dict[str, str] | None:
        """The copy's columns and their types as the store names them; None before the first transfer."""
        table = self.read_rows(model=model, recipient=recipient)
        return {f.name: str(f.type) for f in table.schema} or None

    @abstractmethod
    def drift(self, *, model: ModelConfig, recipient: RecipientConfig, staged: pa.Schema) -> SchemaDiff | None:
        """How a batch with schema ``staged`` differs from the stored copy; None before the first transfer."""

    def check(self) -> None:
        """Reach the store once (``incsync validate --connect``); raise ConfigError or an IncsyncError naming
        the setting and the fix. A local folder the first transfer creates needs no check."""
        return None

    def check_vacant(self, *, recipient: str) -> None:
        """Before ``recipient`` connects this destination itself (onboarding's test, after ``check``): the user may
        create its copies here, and the place is empty or holds only this recipient's copies; raise ConfigError
        naming the fix. Nothing to check by default."""
        return None

    def close(self) -> None:
        """Release what this process holds open for this destination (a connection pool), e.g. after a connection test
        whose settings are not kept; the next use opens it again. Nothing by default."""
        return None

    def row_hashes(self, *, model: ModelConfig, recipient: RecipientConfig) -> RowHashes | None:
        """The copy's own SQL hashing for verify, or None (the default): verify reads ``current_rows``."""
        return None

    def maintain(self, models: list[ModelConfig], *, compact: bool, dry_run: bool) -> list[Maintained]:
        """Compact and vacuum what the models' copies occupy here (``incsync maintain``); one ``Maintained``
        per table or prefix. Nothing to do by default: a database server reclaims updated rows' space itself."""
        return []

    def transfer_ownership(self, *, model: ModelConfig, recipient: RecipientConfig, reason: str) -> Owner | None:
        """Stamp ``recipient`` as the owner of the model's copy (an explicit move, logged in the destination);
        return the previous owner, if any."""
        raise NotImplementedError(f"{self.kind} destinations cannot transfer ownership")


__all__ = [
    "DELETED_AT", "FULL_REFRESH", "INCREMENTAL", "REPAIR", "Capabilities", "Destination", "DestinationState",
    "Location", "Removals", "RowHashes", "TransferRecord", "hw_micros", "reset_reason", "table_state",
]

"""Which tables each recipient's share holds: one share per enabled recipient, named after its id, holding the
models it receives whose copy its destination keeps as a Delta or Iceberg table in a local folder or on S3
(``Location.table_format``), under the names of the ``sharing:`` section. Delta Sharing serves its Delta tables,
the Iceberg REST catalog its Iceberg tables. Found through the destination contract, never a kind's name.

Names compare without case, as the protocols ask. A share is built the first time its recipient asks, so
10,000 recipients cost nothing until they read; a changed configuration file is read again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from incsync.config.model import IncsyncConfig, RecipientConfig
from incsync.config.products import product_models, receives
from incsync.config.sharing import shared_schema, shared_table
from incsync.destinations.base import DELTA_FORMAT, ICEBERG_FORMAT, Destination
from incsync.destinations.registry import build_destination
from incsync.storage.names import is_url, local_path, scheme_of

log = logging.getLogger(__name__)

DELTA = DELTA_FORMAT
ICEBERG = ICEBERG_FORMAT
FORMATS = (DELTA, ICEBERG)
# Object storage a share serves: a Delta table's files as pre-signed URLs, an Iceberg table's through the catalog's
# storage endpoint, which reads them from the bucket.
REMOTE_SCHEMES = ("s3", "s3a")


@dataclass(frozen=True)
class SharedTable:
    """One model's copy of one recipient, as its share lists it."""

    share: str
    schema: str
    name: str
    recipient: str
    model: str
    root: str  # the table's folder: a local path, or an ``s3://`` URL
    format: str = DELTA  # its open table format: which protocol serves it
    # The storage options reading ``root`` when it is a URL (secrets resolved: never shown)
    options: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def key(self) -> str:
        return f"{self.share}.{self.schema}.{self.name}"

    @property
    def remote(self) -> bool:
        """On object storage: its files are read through pre-signed URLs, not the server's file endpoint."""
        return is_url(self.root)


@dataclass(frozen=True)
class RecipientShare:
    """A recipient's share: its tables, in (schema, name) order."""

    name: str
    recipient: str
    tables: tuple[SharedTable, ...]

    def schemas(self) -> list[str]:
        return sorted({t.schema for t in self.tables}, key=str.casefold)

    def has_schema(self, schema: str) -> bool:
        return any(t.schema.casefold() == schema.casefold() for t in self.tables)

    def in_schema(self, schema: str) -> list[SharedTable]:
        return [t for t in self.tables if t.schema.casefold() == schema.casefold()]

    def table(self, schema: str, name: str) -> SharedTable | None:
        return next((t for t in self.in_schema(schema) if t.name.casefold() == name.casefold()), None)

    def of_format(self, fmt: str | None) -> RecipientShare | None:
        """The share as one protocol serves it: its tables of format ``fmt`` (None: all); None when it holds none."""
        tables = tuple(t for t in self.tables if fmt is None or t.format == fmt)
        return RecipientShare(name=self.name, recipient=self.recipient, tables=tables) if tables else None


class Catalog:
    """The shares of one configuration."""

    def __init__(self, config: IncsyncConfig) -> None:
        self.config = config
        self._held = product_models(config)
        self._shares: dict[str, RecipientShare | None] = {}
        self._destinations: dict[str, Destination] = {}

    def share_of(self, recipient_id: str, fmt: str | None = DELTA) -> RecipientShare | None:
        """The share of an enabled recipient holding at least one table of format ``fmt`` (None: of any format), as
        far as that format goes; None for anyone else."""
        if recipient_id not in self._shares:
            try:
                recipient = self.config.recipient(recipient_id)
            except KeyError:
                return None
            self._shares[recipient_id] = self._build(recipient) if recipient.enabled else None
        share = self._shares[recipient_id]
        return None if share is None else share.of_format(fmt)

    def share(self, recipient_id: str, name: str, fmt: str | None = DELTA) -> RecipientShare | None:
        """The share called ``name`` when it is ``recipient_id``'s own; None otherwise, whoever else owns it."""
        share = self.share_of(recipient_id, fmt)
        return share if share is not None and share.name.casefold() == name.casefold() else None

    def metadata_location(self, table: SharedTable) -> str | None:
        """Where the current metadata file of an Iceberg table of a share is, as its destination's catalog says;
        None before the table's first transfer."""
        recipient = self.config.recipient(table.recipient)
        destination = self._destination(recipient.destination)
        return destination.metadata_location(model=self.config.model(table.model), recipient=recipient)

    def _destination(self, name: str) -> Destination:
        if name not in self._destinations:
            self._destinations[name] = build_destination(self.config.destination(name))
        return self._destinations[name]

    def _build(self, recipient: RecipientConfig) -> RecipientShare | None:
        destination = self._destination(recipient.destination)
        tables = []
        for model in self.config.models:
            if not receives(self.config, recipient, model.model_name, held=self._held):
                continue
            location = destination.location(model=model, recipient=recipient)
            if location.table_format not in FORMATS or location.path is None:
                continue
            remote = is_url(location.path)
            if remote and scheme_of(location.path) not in REMOTE_SCHEMES:
                log.warning("recipient %s, model %s: its %s table is on object storage the sharing server does not "
                            "serve yet (S3 only); it is left out of the share", recipient.id,
                            model.model_name, location.table_format.capitalize())
                continue
            tables.append(SharedTable(share=recipient.id, schema=shared_schema(self.config.sharing, model),
                                      name=shared_table(self.config.sharing, model.model_name), recipient=recipient.id,
                                      model=model.model_name, root=location.path if remote else local_path(location.path),
                                      format=location.table_format, options=location.storage_options if remote else None))
        if not tables:
            return None
        tables.sort(key=lambda t: (t.schema.casefold(), t.name.casefold()))
        return RecipientShare(name=recipient.id, recipient=recipient.id, tables=tuple(tables))


class LiveCatalog:
    """The catalog of a configuration file, built again when the file changes (checked at most every second)."""

    def __init__(self, file: Path, load: Callable[[Path], IncsyncConfig], *, every: float = 1.0) -> None:
        self.file = file
        self._load = load
        self._every = every
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._checked = time.monotonic()
        self._catalog = Catalog(load(file))

    def _stat(self) -> tuple[int, int]:
        stat = self.file.stat()
        return stat.st_mtime_ns, stat.st_size

    def current(self) -> Catalog:
        if time.monotonic() - self._checked < self._every:
            return self._catalog
        with self._lock:
            self._checked = time.monotonic()
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._stamp = stamp  # tried once per change: an invalid file is not read again until edited
                    self._catalog = Catalog(self._load(self.file))
            except Exception as exc:  # noqa: BLE001 - a file caught mid-edit or invalid: keep serving the last good one
                log.error("the configuration file %s could not be read again (%s); serving its last valid state",
                          self.file, exc)
        return self._catalog

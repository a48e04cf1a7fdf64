"""What `incsync transfer` was asked, as one typed value: parsed once from the command line, then run in
this process or sent to a worker as its protocol's ``transfer`` object and rebuilt there, field by field
checked. Standard library and the errors modules only: the thin client imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from incsync.worker.errors import WorkerError

if TYPE_CHECKING:
    import dagster as dg

# What a worker lends each command it runs: the definitions and instance it keeps loaded for a config file.
Resident = Callable[[Path], "tuple[dg.Definitions, dg.DagsterInstance]"]

# The protocol's transfer fields and the JSON types each may hold: what was asked, never argv.
TRANSFER_FIELDS: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "recipients": (list,),
    "window": (str, type(None)),
    "backfill": (bool,),
    "full_refresh": (bool,),
    "tags": (list,),
    "from": (str, type(None)),
    "to": (str, type(None)),
    "json": (bool,),
    "verbose": (bool,),
}


@dataclass(frozen=True)
class TransferCommand:
    """One ``incsync transfer``: a model, its recipients (none: every enabled one) and which windows."""

    model: str
    recipients: tuple[str, ...] = ()
    window: str | None = None
    backfill: bool = False
    full_refresh: bool = False
    tags: tuple[str, ...] = ()  # key=value, as typed
    from_: str | None = None
    to: str | None = None
    json: bool = False
    verbose: bool = False  # a line per window partition, not per recipient
    # Never sent to a worker: a dry run writes nothing, and deleting past max_delete_fraction is decided here.
    dry_run: bool = False
    allow_mass_delete: bool = False

    @property
    def runs_here(self) -> bool:
        """Whether this command runs in the calling process even when a worker is named."""
        return self.dry_run or self.allow_mass_delete

    def wire(self) -> dict[str, Any]:
        """The protocol's ``transfer`` object (``TRANSFER_FIELDS``)."""
        return {
            "model": self.model, "recipients": list(self.recipients), "window": self.window, "backfill": self.backfill,
            "full_refresh": self.full_refresh, "tags": list(self.tags), "from": self.from_, "to": self.to,
            "json": self.json, "verbose": self.verbose,
        }

    @classmethod
    def from_wire(cls, fields: object) -> TransferCommand:
        """The command a client sent; ``WorkerError`` naming the first field that is missing or mistyped."""
        if (problem := wire_problem(fields)) is not None:
            raise WorkerError(problem)
        fields = cast("dict[str, Any]", fields)
        return cls(
            model=fields["model"], recipients=tuple(fields["recipients"]), window=fields["window"],
            backfill=fields["backfill"], full_refresh=fields["full_refresh"], tags=tuple(fields["tags"]),
            from_=fields["from"], to=fields["to"], json=fields["json"], verbose=fields["verbose"],
        )


def wire_problem(fields: object) -> str | None:
    """Why ``fields`` is not a transfer command's protocol object (None: it is one)."""
    if not isinstance(fields, dict) or set(fields) != set(TRANSFER_FIELDS):
        return f"the worker runs transfer requests with the fields {', '.join(TRANSFER_FIELDS)}"
    for name, kinds in TRANSFER_FIELDS.items():
        value = fields[name]
        if not isinstance(value, kinds) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            return f"transfer request field {name!r} has the wrong type ({type(value).__name__})"
    return None

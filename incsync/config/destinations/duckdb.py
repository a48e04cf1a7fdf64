"""`kind: duckdb`: a DuckDB database file holding one recipient's copy."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field

from incsync.config.destinations.base import NAME_HELP, Placed
from incsync.config.locations import Location, resolved_path


class DuckDBDestinationConfig(Placed):
    """A DuckDB database file: one table per model in `schema`, the transfer log beside them."""

    name: str = Field(description=NAME_HELP)
    kind: Literal["duckdb"] = Field(description="`duckdb`.")
    path: str = Field(
        description="The database file (created when missing); relative paths are relative to the file. One "
        "recipient's copy: DuckDB lets one process write a file at a time.",
    )
    schema_name: str = Field(default="main", alias="schema", description="Schema of the tables, created when missing.")
    max_concurrent_transfers: int = Field(default=1, ge=1, le=1, description="DuckDB has one writer per file: 1.")
    lock_timeout_seconds: float = Field(
        default=30.0, ge=0, le=3600,
        description="How long a transfer waits, trying again with backoff, while another process holds the file "
        "open (a recipient's reader polling it) before it fails; 0: fail at once.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    starter: ClassVar[str] = """\
  - name: acme_duckdb
    kind: duckdb
    path: ./out/acme.duckdb   # a DuckDB file (created when missing): one table per model; one recipient's copy
"""

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        key = resolved_path(self.path, base, _folders=folders)  # one file may hold several schemas: (file, schema)
        return Location("duckdb", f"{key}::{self.schema_name}", f"DuckDB file {key} schema {self.schema_name}")

    def described(self) -> str:
        return f"{self.path} schema {self.schema_name}"

    def drop_hint(self, model: str, recipient: str) -> str:
        return f'run DROP TABLE "{self.schema_name}"."{model}" there'

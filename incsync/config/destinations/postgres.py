"""`kind: postgres`: a PostgreSQL schema, its connection string in a variable or the vault."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from incsync.config.destinations.base import CONCURRENCY_HELP, NAME_HELP, Placed
from incsync.config.locations import LOOPBACK, Location
from incsync.config.secrets import REF_HELP, SecretField, SecretRef


class PostgresDestinationConfig(Placed):
    """A PostgreSQL schema; the DSN comes from an environment variable or the vault."""

    name: str = Field(description=NAME_HELP)
    kind: Literal["postgres"] = Field(description="`postgres`.")
    dsn_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the connection string (postgresql://...); or set "
        "`dsn_secret`.",
    )
    dsn_secret: SecretField | None = Field(
        default=None,
        description=f"The connection string by reference instead of `dsn_env`: {REF_HELP} (docs/secrets.md).",
    )
    schema_name: str = Field(alias="schema", description="Target schema, created when missing.")
    max_concurrent_transfers: int = Field(default=1, ge=1, description=CONCURRENCY_HELP)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    secret_help: ClassVar[str] = ("The connection string, postgresql://user:password@host:5432/database; kept encrypted in "
                                  "the provider's vault and never shown again.")
    secret_field: ClassVar[str | None] = "dsn_secret"
    starter: ClassVar[str] = """\
  - name: acme_pg
    kind: postgres
    dsn_env: ACME_DSN         # the variable holding postgresql://user@host:5432/db: export it
    schema: acme              # created when missing; one schema per recipient
"""

    @model_validator(mode="after")
    def _one_dsn(self) -> PostgresDestinationConfig:
        if (self.dsn_env is None) == (self.dsn_secret is None):
            raise ValueError("set exactly one of `dsn_env` (a variable's name) and `dsn_secret` "
                             f"({REF_HELP}) for the connection string")
        return self

    @property
    def dsn_ref(self) -> SecretRef:
        """Where the connection string is."""
        return self.dsn_secret or SecretRef("env", self.dsn_env or "")

    @property
    def dsn_field(self) -> str:
        """The field that names it, for messages."""
        return "dsn_env" if self.dsn_secret is None else "dsn_secret"

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        return postgres_location(self.dsn_ref, self.schema_name)  # (server, port, database, schema) from the DSN

    def location_note(self) -> str | None:
        return postgres_location(self.dsn_ref, self.schema_name).note

    def described(self) -> str:
        return f"schema {self.schema_name} (DSN in {self.dsn_ref.shown})"

    def required_variables(self) -> list[tuple[str, str, str]]:
        ref = self.dsn_ref
        return [(self.dsn_field, ref.name, "postgresql://...")] if ref.store == "env" else []

    def drop_hint(self, model: str, recipient: str) -> str:
        return f'run DROP TABLE "{self.schema_name}"."{model}" there'


def postgres_location(dsn: SecretRef, schema: str) -> Location:
    """(server, port, database, schema) from the DSN in a variable; a DSN in the vault is compared by its entry's
    name and the schema: it is opened only where a connection is made."""
    if dsn.store == "vault":
        return Location(
            "postgres", f"vault:{dsn.name}/{schema}", f"vault entry {dsn.name} schema {schema}",
            note="destinations whose DSN is in the vault were compared by entry name and schema only",
        )
    return _env_postgres_location(dsn.name, schema)


def _env_postgres_location(dsn_env: str, schema: str) -> Location:
    dsn = os.environ.get(dsn_env)
    if dsn is None:
        return Location(
            "postgres", f"env:{dsn_env}/{schema}", f"${dsn_env} schema {schema}",
            note=f"${dsn_env} is not set, so its destinations were compared by variable name and schema only",
        )
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - its message may quote the DSN: never show it
        return Location(
            "postgres", f"env:{dsn_env}/{schema}", f"${dsn_env} schema {schema}",
            note=f"${dsn_env} is not a PostgreSQL connection string, so it was compared by variable name and schema only",
        )
    host = str(info.get("host") or info.get("hostaddr") or os.environ.get("PGHOST", "")).lower()
    host = "localhost" if host in LOOPBACK or host.startswith("/") else host  # a socket folder is this machine
    port = str(info.get("port") or os.environ.get("PGPORT") or "5432")
    user = info.get("user") or os.environ.get("PGUSER") or ""
    database = str(info.get("dbname") or os.environ.get("PGDATABASE") or user)
    return Location("postgres", f"{host}:{port}/{database}/{schema}", f"postgresql://{host}:{port}/{database} schema {schema}")

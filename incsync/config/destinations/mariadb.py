"""`kind: mariadb` (or `mysql`): a MariaDB or MySQL database holding one recipient's copy."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from incsync.config.destinations.base import CONCURRENCY_HELP, NAME_HELP, Placed
from incsync.config.locations import LOOPBACK, Location
from incsync.config.secrets import REF_HELP, SecretField, SecretRef


class MariaDBDestinationConfig(Placed):
    """A MariaDB (or MySQL) database: one InnoDB table per model, the transfer log beside them; the password
    comes from an environment variable or the vault."""

    name: str = Field(description=NAME_HELP)
    kind: Literal["mariadb", "mysql"] = Field(description="`mariadb` (or its alias `mysql`).")
    host: str = Field(default="127.0.0.1", description="The server's host name or address.")
    port: int = Field(default=3306, ge=1, le=65535, description="The server's port.")
    user: str = Field(description="The user incsync writes as: it needs CREATE, ALTER, SELECT, INSERT, UPDATE, DELETE "
                      "and CREATE TEMPORARY TABLES on the database.")
    password_env: str | None = Field(
        default=None, description="Name of the environment variable holding the password (none: no password).",
    )
    password_secret: SecretField | None = Field(
        default=None, description=f"The password by reference instead of `password_env`: {REF_HELP} (docs/secrets.md).",
    )
    database: str = Field(description="The recipient's database (created when missing); one recipient's copy.")
    max_concurrent_transfers: int = Field(default=1, ge=1, description=CONCURRENCY_HELP)

    secret_help: ClassVar[str] = "The password of `user` (empty: none); kept encrypted in the provider's vault and never shown again."
    secret_field: ClassVar[str | None] = "password_secret"
    starter: ClassVar[str] = """\
  - name: acme_mariadb
    kind: mariadb             # MariaDB or MySQL (kind: mysql is the same)
    host: 127.0.0.1
    port: 3306
    user: incsync_writer      # needs CREATE, ALTER, SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES there
    password_env: ACME_MARIADB_PASSWORD  # the variable holding the password: export it (omit for none)
    database: acme            # created when missing: one table per model; one recipient's copy
"""

    @model_validator(mode="after")
    def _one_password(self) -> MariaDBDestinationConfig:
        if self.password_env is not None and self.password_secret is not None:
            raise ValueError("set at most one of `password_env` and `password_secret`")
        return self

    @property
    def password_ref(self) -> SecretRef | None:
        """Where the password is (None: no password)."""
        if self.password_secret is not None:
            return self.password_secret
        return SecretRef("env", self.password_env) if self.password_env else None

    @property
    def password_field(self) -> str:
        return "password_env" if self.password_secret is None else "password_secret"

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        host = "localhost" if self.host.lower() in LOOPBACK else self.host.lower()  # a database is a copy
        key = f"{host}:{self.port}/{self.database}"
        return Location("mariadb", key, f"mariadb://{key}")

    def described(self) -> str:
        return f"mariadb://{self.host}:{self.port}/{self.database}"

    def required_variables(self) -> list[tuple[str, str, str]]:
        ref = self.password_ref
        return [(self.password_field, ref.name, "...")] if ref is not None and ref.store == "env" else []

    def drop_hint(self, model: str, recipient: str) -> str:
        return f"run DROP TABLE `{self.database}`.`{model}` there"

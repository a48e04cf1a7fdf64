"""Secrets by reference: ``vault:<entry>`` (an entry of incsync's vault) or ``env:<VARIABLE>``, and the
``vault:`` section that says where the vault's table lives and where its key comes from.

The file never holds a secret, only where to find one. A reference is bound to the vault's place when the
configuration is loaded (``bind_secrets``), so the destination that opens it at connect time needs nothing
else; opening it is ``incsync.secrets`` (docs/secrets.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, PlainSerializer, PlainValidator, model_validator

from incsync.config.base import StrictModel
from incsync.config.sources import JdbcSourceConfig

if TYPE_CHECKING:
    from incsync.config.model import IncsyncConfig

ENTRY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
VARIABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_KEY_ENV = "INCSYNC_VAULT_KEY"
REF_HELP = "`vault:<entry>` (an entry of the vault) or `env:<VARIABLE>` (an environment variable's name)"


@dataclass(frozen=True)
class VaultPlace:
    """Where the vault's table is and where its key comes from, resolved from the file (no secret):
    a PostgreSQL ``source`` and its ``table``, or a SQLite file ``path``; the key in ``key_env`` or ``key_file``."""

    table: str
    source: JdbcSourceConfig | None
    path: str | None
    key_env: str
    key_file: str | None

    @property
    def shown(self) -> str:
        return f"{self.table} through source {self.source.name}" if self.source else f"{self.path}"

    @property
    def key(self) -> str:
        """The table's identity (where it is, never a secret), for a process's copy of it."""
        if self.source is not None:
            return f"postgres:{self.source.jdbc_url}|{self.source.user}|{self.table}"
        return f"sqlite:{self.path}|{self.table}"


@dataclass(frozen=True)
class SecretRef:
    """Where a secret is: an environment variable (``store="env"``) or a vault entry (``store="vault"``,
    with the vault's place once the configuration is loaded)."""

    store: Literal["env", "vault"]
    name: str
    vault: VaultPlace | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.store}:{self.name}"

    @property
    def shown(self) -> str:
        """How messages name it: ``$VARIABLE`` or ``vault entry <name>``."""
        return f"${self.name}" if self.store == "env" else f"vault entry {self.name}"


def parse_secret_ref(value: object) -> SecretRef:
    """``vault:<entry>`` or ``env:<VARIABLE>`` as a reference; a message that never repeats the value (it may
    be the secret itself, pasted where its reference belongs)."""
    if isinstance(value, SecretRef):
        return value
    if isinstance(value, str):
        store, _, name = value.partition(":")
        if store == "vault" and ENTRY_RE.match(name):
            return SecretRef("vault", name)
        if store == "env" and VARIABLE_RE.match(name):
            return SecretRef("env", name)
    raise ValueError(f"must be a reference, {REF_HELP}; never the secret itself (docs/secrets.md)")


SecretField = Annotated[SecretRef, PlainValidator(parse_secret_ref), PlainSerializer(str)]


class VaultConfig(StrictModel):
    """Where incsync's vault keeps its sealed entries: a table read through a PostgreSQL source, or a SQLite
    file on a laptop; and the key that seals them."""

    source: str | None = Field(
        default=None,
        description="A source of vendor postgres whose credentials read the vault's table (and, for `incsync "
        "secrets set|rotate-key`, write it); or set `path`.",
    )
    table: str = Field(default="incsync_vault", description="`table` or `schema.table` of the entries, created by "
                       "the first `incsync secrets set`.")
    path: str | None = Field(
        default=None, description="A SQLite file holding the table instead (one machine); relative to the file.",
    )
    key_env: str = Field(
        default=DEFAULT_KEY_ENV,
        description="Name of the environment variable holding the vault's keys: the newest first, separated by "
        "commas; older ones still open what they sealed until `incsync secrets rotate-key` (docs/secrets.md).",
    )
    key_file: str | None = Field(
        default=None, description="A file holding the keys instead of `key_env` (same text); relative to the file.",
    )

    @model_validator(mode="after")
    def _one_place(self) -> VaultConfig:
        if (self.source is None) == (self.path is None):
            raise ValueError("set exactly one of `source` (a postgres source) and `path` (a SQLite file)")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", self.table):
            raise ValueError(f'table "{self.table}" must be `table` or `schema.table`')
        if self.path is not None and "." in self.table:
            raise ValueError(f'table "{self.table}" of a SQLite file takes no schema: name the table alone')
        if not VARIABLE_RE.match(self.key_env):
            raise ValueError(f'key_env "{self.key_env}" must be a variable name (letters, digits and _)')
        return self


def _resolved(path: str | None, base: Path) -> str | None:
    return None if path is None else os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def vault_place(cfg: IncsyncConfig, base: Path) -> VaultPlace | None:
    """The vault of ``cfg`` (None without a ``vault:`` section); relative paths against ``base``."""
    vault = cfg.vault
    if vault is None:
        return None
    source = next((s for s in cfg.sources if s.name == vault.source), None) if vault.source else None
    return VaultPlace(
        table=vault.table, source=source if isinstance(source, JdbcSourceConfig) else None,
        path=_resolved(vault.path, base), key_env=vault.key_env, key_file=_resolved(vault.key_file, base),
    )


def vault_problems(cfg: IncsyncConfig) -> list[str]:
    """The ``vault:`` section names a postgres source; a destination naming a vault entry has a vault."""
    problems = []
    if cfg.vault is not None and cfg.vault.source is not None:
        vendors = {s.name: s.vendor for s in cfg.sources}
        if vendors.get(cfg.vault.source) != "postgres":
            problems.append(f'vault.source: "{cfg.vault.source}" must name a source of vendor postgres '
                            f"(known: {', '.join(vendors) or 'none'})")
    if cfg.vault is None:
        for i, d in enumerate(cfg.destinations):
            for name, ref in secret_refs(d):
                if ref.store == "vault":
                    problems.append(f"destinations[{i}].{name}: {ref} names the vault, but the file has no `vault:` "
                                    "section; add one saying where its table is (docs/secrets.md)")
    return problems


def secret_refs(destination: object) -> list[tuple[str, SecretRef]]:
    """(field, reference) of each secret reference a destination model holds."""
    return [(name, value) for name in type(destination).model_fields  # type: ignore[attr-defined]  # a destination config model: pydantic fields
            if isinstance(value := getattr(destination, name), SecretRef)]


def bind_secrets(cfg: IncsyncConfig, base: Path) -> IncsyncConfig:
    """``cfg`` with every vault reference of its destinations bound to the vault's place."""
    place = vault_place(cfg, base)
    if place is None:
        return cfg
    destinations = []
    for d in cfg.destinations:
        bound = {name: replace(ref, vault=place) for name, ref in secret_refs(d) if ref.store == "vault"}
        destinations.append(d.model_copy(update=bound) if bound else d)
    return cfg.model_copy(update={"destinations": destinations})

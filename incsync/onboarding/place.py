"""Where onboarding reads and writes, resolved from the file: the ``recipients_from`` source and its two tables,
onboarding's own tables beside them, and the vault. A file without them is refused naming the setting."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from incsync.config.model import IncsyncConfig
from incsync.config.onboarding import OnboardingConfig
from incsync.config.secrets import VaultPlace, vault_place
from incsync.config.sources import JdbcSourceConfig
from incsync.onboarding.errors import NotConfigured

EXAMPLE = ("recipients_from: {source: app_db, table: public.incsync_recipients, destinations_table: "
           "public.incsync_destinations}")


@dataclass(frozen=True)
class Place:
    """Onboarding's tables and vault for one file."""

    file: Path
    source: JdbcSourceConfig
    recipients_table: str
    destinations_table: str
    vault: VaultPlace
    settings: OnboardingConfig

    def own_table(self, suffix: str) -> str:
        """``<schema>.<prefix>_<suffix>``: onboarding's table beside the recipients table."""
        schema, _, _ = self.recipients_table.rpartition(".")
        name = f"{self.settings.tables_prefix}_{suffix}"
        return f"{schema}.{name}" if schema else name

    @property
    def links_table(self) -> str:
        return self.own_table("links")

    @property
    def keys_table(self) -> str:
        return self.own_table("keys")

    @property
    def audit_table(self) -> str:
        return self.own_table("audit")


def onboarding_place(cfg: IncsyncConfig, file: Path) -> Place:
    """The place of ``cfg`` (read from ``file``); NotConfigured naming the missing setting and the fix."""
    spec = cfg.recipients_from
    if spec is None:
        raise NotConfigured(f"{file}: onboarding writes recipients into the `recipients_from` table, which is not "
                            f"configured; add `{EXAMPLE}` (a postgres source; docs/onboarding.md)")
    if spec.destinations_table is None:
        raise NotConfigured(f"{file}: recipients_from.destinations_table is not set; onboarding writes each recipient's "
                            "destination there: add `destinations_table: public.incsync_destinations` to recipients_from "
                            "(docs/secrets.md, Destinations as data)")
    source = next((s for s in cfg.sources if s.name == spec.source), None)
    if not isinstance(source, JdbcSourceConfig):
        raise NotConfigured(f'{file}: recipients_from.source "{spec.source}" must name a postgres source')
    vault = vault_place(cfg, file.resolve().parent)
    if vault is None:
        raise NotConfigured(f"{file}: onboarding keeps each recipient's secret in the vault, and the file has no "
                            "`vault:` section; add one, e.g. `vault: {source: app_db, table: incsync_vault}` "
                            "(docs/secrets.md)")
    return Place(file=file, source=source, recipients_table=spec.table, destinations_table=spec.destinations_table,
                 vault=vault, settings=cfg.onboarding or OnboardingConfig())

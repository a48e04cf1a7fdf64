"""The `onboarding:` section: a recipient connects its own destination through a link (docs/onboarding.md).

Onboarding writes the ``recipients_from`` tables (a recipient's row, its destination's row) and the vault (the
destination's secret), so it needs all three; its own tables (links, audit) sit beside the recipients table.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from incsync.config.base import StrictModel
from incsync.config.destinations import DESTINATION_MODELS, model_kinds, secret_fields
from incsync.config.secrets import REF_HELP, VARIABLE_RE, SecretField

DEFAULT_ADMIN_TOKEN_ENV = "INCSYNC_ADMIN_TOKEN"


def default_kinds() -> list[str]:
    """The kinds a recipient may choose unless the file says: every kind whose secret the vault keeps (a database
    of the recipient's own), never a folder on the provider's machine."""
    return sorted({model_kinds(DESTINATION_MODELS[kind])[0] for kind in secret_fields()})


class OnboardingConfig(StrictModel):
    """Recipients connecting their own destinations: the provider issues a link (`incsync onboard link`), the
    recipient opens it, enters its destination, tests it and submits; `incsync serve` serves the page."""

    kinds: list[str] = Field(
        default_factory=default_kinds,
        description="The destination kinds a recipient may choose on its page. Unset: every kind with a secret "
        "(the databases: its connection string or password is kept in the vault).",
    )
    link_lifetime_hours: float = Field(
        default=72, gt=0, le=24 * 90,
        description="How long an onboarding link stays valid; it is single-use (one destination submitted) and "
        "revocable (`incsync onboard revoke`).",
    )
    tables_prefix: str = Field(
        default="incsync_onboarding", pattern=r"^[a-z_][a-z0-9_]{0,40}$",
        description="Prefix of onboarding's own tables (`<prefix>_links`, `<prefix>_keys`, `<prefix>_audit`), created "
        "beside the `recipients_from` table, in its schema, through its source.",
    )
    admin_token_env: str = Field(
        default=DEFAULT_ADMIN_TOKEN_ENV,
        description="Name of the environment variable holding the provider API's bearer token (at least 32 "
        "characters), unless `admin_token_secret` names it.",
    )
    admin_token_secret: SecretField | None = Field(
        default=None, description=f"The provider API's bearer token by reference instead: {REF_HELP}.",
    )
    attempts_per_minute: int = Field(
        default=20, ge=1, le=10_000,
        description="Unknown, expired or refused links one client may present per minute before the page answers "
        "429 (link guessing).",
    )

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = [k for k in kinds if k not in DESTINATION_MODELS]
        if unknown or not kinds:
            raise ValueError(f"kinds: {', '.join(unknown) or 'none'} — choose among {', '.join(DESTINATION_MODELS)}")
        return list(dict.fromkeys(kinds))

    @field_validator("admin_token_env")
    @classmethod
    def _variable(cls, name: str) -> str:
        if not VARIABLE_RE.match(name):
            raise ValueError(f'admin_token_env "{name}" must be a variable name (letters, digits and _)')
        return name

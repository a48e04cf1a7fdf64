"""The file's recipients, and the table of recipients (and destinations) kept beside them."""

from __future__ import annotations

from pydantic import Field, field_validator

from incsync.config.base import ID_PATTERN, ID_RE, StrictModel


class RecipientConfig(StrictModel):
    """One customer: a dynamic partition key and where its copy lives."""

    id: str = Field(
        pattern=ID_PATTERN,
        description="Recipient id: letters, digits, _ and -; the recipient partition key.",
    )
    id_in_provider_system: str = Field(
        description="The recipient's tenant value (organization_column) or schema name (tenancy: schema), exactly as "
        "the database spells it (see Names below).",
    )
    destination: str = Field(description="Name of the destination holding its copy.")
    default_full_refresh_min_start_time_epoch: int | None = Field(
        default=None, ge=0,
        description="Overrides the model's min_start_time_epoch for this recipient.",
    )
    enabled: bool = Field(
        default=True,
        description="false: no schedule, no sensor backfill; its partitions are removed.",
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="key: value pairs carried as run tags (incsync/tag/<key>), e.g. tier: gold (with `tiers`: its schedule tier).",
    )
    products: list[str] | None = Field(
        default=None,
        description="The products it subscribes to: it receives their models only. Unset: every model.",
    )

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        for key, value in tags.items():
            if not ID_RE.match(key) or not ID_RE.match(str(value)):
                raise ValueError(f'tag {key}={value} is invalid: keys and values must match {ID_PATTERN}')
        return tags


class RecipientsFromConfig(StrictModel):
    """A table of recipients (columns: the recipient fields), and optionally one of destinations, read through a
    postgres source."""

    source: str = Field(description="A source of vendor postgres whose credentials read the table.")
    table: str = Field(description="`table` or `schema.table`.")
    destinations_table: str | None = Field(
        default=None,
        description="`table` or `schema.table` of destinations kept as data, read through the same source: one row "
        "per destination (columns `name`, `kind`, `fields` (a JSON object of the kind's fields) and `secret` (a "
        "reference, e.g. `vault:acme_pg`), docs/secrets.md).",
    )
    refresh_seconds: int = Field(default=30, ge=0, description="Read the tables again after this long (0: every time).")

"""The configuration file's model: the whole file, its models and recipients (the retry and maintenance
policies are ``incsync.config.policies``).

Secrets are never in the file, only references to them: environment variables' names or vault entries
(``incsync.config.secrets``). Sources are
``incsync.config.sources``, destinations ``incsync.config.destinations``, what every section shares
``incsync.config.base``. Reading a file (environment, paths, the recipients table) is
``incsync.config.load``; the checks across fields are ``incsync.config.checks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from incsync.config.alerts import AlertsConfig
from incsync.config.base import StrictModel, listed_names
from incsync.config.destinations import DestinationConfig
from incsync.config.jobs import AuditConfig, AutoWorkerConfig, MaintenanceConfig
from incsync.config.onboarding import OnboardingConfig
from incsync.config.policies import RetryPolicy
from incsync.config.products import ProductConfig, TierConfig
from incsync.config.recipients import RecipientConfig, RecipientsFromConfig
from incsync.config.secrets import VaultConfig
from incsync.config.sharing import SharingConfig
from incsync.config.sources import DEFAULT_LOOKBACK_SECONDS, FALLBACK_LOOKBACK_SECONDS, SourceConfig

__all__ = ["IncsyncConfig", "MaintenanceConfig", "ModelConfig", "RecipientConfig", "RecipientsFromConfig", "RetryPolicy"]


class ModelConfig(StrictModel):
    """One logical table shared with the recipients receiving it (every one, without products)."""

    model_name: str = Field(
        description="Name of the model: the asset, the destination table and the job are named after it.",
    )
    source: str = Field(description="Name of the source it reads.")
    source_table: str | None = Field(
        default=None,
        description="`table` or `schema.table`, as the database spells it (or set `source_query`).",
    )
    source_query: str | None = Field(
        default=None,
        description="A SELECT run as pasted, wrapped with the tenant and time bounds (or set `source_table`).",
    )
    columns: list[str] | None = Field(default=None, description="Columns to transfer; default: all.")
    primary_key: list[str] = Field(
        min_length=1,
        description="Column(s) identifying a row; upserts and validation use them.",
    )
    last_modified_column: str = Field(description="Timestamp column set on every change; it drives the high watermark.")
    organization_column: str | None = Field(
        default=None,
        description="Tenant column: a recipient's rows are those whose value equals its `id_in_provider_system`.",
    )
    tenancy: Literal["column", "schema"] = Field(
        default="column",
        description="`column` (one table for all tenants, split by `organization_column`) or `schema` (one schema per "
        "tenant, named by each recipient's `id_in_provider_system`: any name the database holds, see Names below).",
    )
    last_modified_timezone: str | None = Field(
        default=None, description="IANA zone of a last-modified column stored without zone."
    )
    max_transfer_time_window_seconds: int = Field(
        default=86_400, gt=0,
        description="Window size: whole minutes dividing an hour, whole hours dividing a day, or 86400.",
    )
    min_start_time_epoch: int = Field(
        ge=0,
        description="Epoch seconds of the first data to transfer; windows start here.",
    )
    frequency: str = Field(
        default="*/15 * * * *",
        description="Cron of the model's schedule (UTC); with the tiers' crons, it sets the asset's Dagster "
        "freshness policy (docs/design.md#freshness).",
    )
    lookback_seconds: int | None = Field(
        default=None, ge=0,
        description="Overrides the source's lookback for this model.",
    )
    # Smaller than the design's million (docs/design.md#commit-size): a commit's rows are what a transfer holds
    # at once (a Delta write sorts them, a MERGE holds their keys), so a big tenant's backfill stays close to a
    # small one's in memory, at the price of more commits.
    max_rows_per_batch: int = Field(
        default=250_000, ge=1,
        description="A transfer over many windows is read once and committed in batches of at most this many "
        "rows, split at window boundaries (a window is never split). What a transfer holds in memory at once "
        "follows it (docs/operations.md, Sizing memory).",
    )
    max_horizon_lag_seconds: int | None = Field(default=None, ge=0, description="Overrides the source's.")
    column_types: dict[str, str] | None = Field(
        default=None,
        description="Column -> type to read it as, overriding the faithful default (docs/types.md): text, boolean, "
        "smallint, integer, bigint, real, double, date, time or decimal(p,s).",
    )
    deletes: Literal["none", "hard", "soft"] = Field(
        default="none",
        description="Rows that leave the tenant at the source (deleted, or moved to another tenant): kept (none: by "
        "transfers and by `incsync repair`; verify counts them as total_rows_retained, which never fails it), deleted "
        "(hard) or stamped _incsync_deleted_at (soft) in the destination, by every transfer and by `incsync repair` "
        "(verify fails on them as total_rows_orphaned until then). A full refresh rebuilds the copy from the source "
        "under every mode.",
    )
    is_deleted_column: str | None = Field(
        default=None,
        description="A soft-delete flag of the source (e.g. is_deleted): transferred like any other column, so a "
        "row the source marks deleted arrives marked, with its last-modified change.",
    )
    cluster_by: list[str] | None = Field(
        default=None,
        description="Delta destinations only (others ignore it, and validate says so): column(s) the recipient's "
        "changes follow and a key never changes, e.g. a creation date. Files are written ordered by them, then "
        "the primary key, and a MERGE skips the files whose range of them the batch's misses (docs/maintenance.md). "
        "A key seen with another value is still merged right, at the cost of every file its key range spans.",
    )
    max_delete_fraction: float = Field(
        default=0.1, ge=0, le=1,
        description="A transfer or repair that would remove more than this fraction of a recipient's rows stops "
        "unless --allow-mass-delete.",
    )
    integrity_check: Literal["manual", "after_transfer", "schedule"] = Field(
        default="manual",
        description="When the model's Dagster asset check `integrity` (verify) runs: when launched (UI, "
        "`incsync verify`), also after each transfer, or also on its own `integrity_check_cron`.",
    )
    integrity_check_cron: str = Field(default="0 3 * * *", description="Cron of the check's own schedule.")
    integrity_sampling_rate: float = Field(default=1.0, gt=0, le=1, description="Fraction of buckets the check reads.")
    integrity_repair: bool = Field(
        default=False,
        description="When the check finds a recipient's copy wrong, repair it at once (`incsync repair`: only the "
        "wrong keys; max_delete_fraction still applies). The check still reports what it found.",
    )

    @model_validator(mode="after")
    def _shape(self) -> ModelConfig:
        if (self.source_table is None) == (self.source_query is None):
            raise ValueError("set exactly one of `source_table` and `source_query`")
        if self.tenancy == "column" and not self.organization_column:
            raise ValueError('set `organization_column` (the tenant column) or `tenancy: schema`')
        if self.tenancy == "schema" and self.organization_column:
            raise ValueError("`organization_column` and `tenancy: schema` exclude each other: keep one")
        return self

    @property
    def selected_columns(self) -> list[str] | None:
        return list(self.columns) if self.columns else None


class IncsyncConfig(StrictModel):
    """The whole file."""

    sources: list[SourceConfig] = Field(
        default_factory=list,
        description="Where the data comes from: lake folders or databases (`vendor`).",
    )
    destinations: list[DestinationConfig] = Field(
        default_factory=list,
        description="Where each recipient's copy lives: `delta`, `postgres` or `object_storage` (`kind`).",
    )
    models: list[ModelConfig] = Field(
        default_factory=list,
        description="The tables shared with the recipients (see products): one Dagster asset each.",
    )
    recipients: list[RecipientConfig] = Field(
        default_factory=list,
        description="The customers: each gets its tenant's rows of its products' models in its own destination.",
    )
    products: list[ProductConfig] = Field(
        default_factory=list, description="Named sets of models recipients subscribe to (docs/operations.md)."
    )
    tiers: list[TierConfig] = Field(
        default_factory=list, description="Schedule tiers: a recipient tagged `tier: <name>` runs on the tier's cron."
    )
    staging_dir: str | None = Field(default=None, description="Root of per-transfer staging folders (a path or a URL).")
    staging_storage_options: dict[str, str] = Field(
        default_factory=dict, description="storage_options of an object-store `staging_dir` (docs/storage.md)."
    )
    recipients_from: RecipientsFromConfig | None = Field(
        default=None, description="A table of recipients, read beside the `recipients` of the file."
    )
    # More than the design's 256 (docs/design.md#recipients-per-run): each run pays a fixed cost before its
    # first read, so fewer, fuller runs make a scheduled cycle cheaper.
    recipients_per_run: int = Field(
        default=1000, ge=1,
        description="Schedules, the sensor and the CLI launch one run per this many recipients of a model; "
        "the run reads them with one query and publishes each recipient's rows to its own destination. "
        "Each run pays ~20 s (a process and a local Spark JVM) before its first read.",
    )
    spark: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings (spark.master, ...).")
    maintenance: MaintenanceConfig = Field(
        default_factory=MaintenanceConfig,
        description="Keeping the destinations' storage bounded: `maintenance: {frequency: \"0 3 * * *\"}` "
        "(docs/maintenance.md).",
    )
    retries: RetryPolicy = Field(
        default_factory=RetryPolicy,
        description="Retries of source reads and destination publishes that fail with a transient error "
        "(e.g. `retries: {attempts: 3, backoff_seconds: 2}`).",
    )
    alerts: AlertsConfig | None = Field(
        default=None, description="Post each failed transfer, with its blamed party, to a webhook "
        "(`alerts: {webhook_url_env: INCSYNC_ALERT_WEBHOOK, blamed: [provider]}`; docs/operations.md).",
    )

    audit: AuditConfig | None = Field(
        default=None, description="The transfer log in one of the provider's destinations "
        "(`audit: {destination: warehouse, frequency: \"*/15 * * * *\"}`; docs/operations.md). Unset: no log.",
    )
    vault: VaultConfig | None = Field(
        default=None, description="Where incsync's vault keeps secrets sealed under its key, for destinations that "
        "name them `vault:<entry>` (`vault: {source: app_db, table: incsync.vault}`; docs/secrets.md).",
    )
    onboarding: OnboardingConfig | None = Field(
        default=None, description="Recipients connecting their own destinations through a link and a page of "
        "`incsync serve` (`onboarding: {kinds: [postgres]}`; needs `recipients_from` with `destinations_table`, and "
        "`vault`; docs/onboarding.md).",
    )
    worker: AutoWorkerConfig = Field(
        default_factory=AutoWorkerConfig, description="The worker `incsync transfer` starts on first use and reuses "
        "until it idles (`worker: {auto_start: false}` turns it off; docs/operations.md).",
    )
    sharing: SharingConfig = Field(
        default_factory=SharingConfig, description="How `incsync serve` serves each recipient's copy over Delta "
        "Sharing and an Iceberg REST catalog, and the names its share gives the models (docs/sharing.md).",
    )

    # The table rows left out (``incsync.config.rows``): set by the loader, never by the file.
    _refused: tuple[Any, ...] = PrivateAttr(default=())

    @property
    def refused_rows(self) -> tuple[Any, ...]:
        """The ``RefusedRow`` of each recipients or destinations table row the load left out, and why."""
        return self._refused

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> IncsyncConfig:
        """A copy whose name lookups are built again: the copy's sections may differ from this one's."""
        copied = super().model_copy(update=update, deep=deep)
        for cached in ("_recipients_by_id", "_destinations_by_name"):
            copied.__dict__.pop(cached, None)
        return copied

    def source(self, name: str) -> SourceConfig:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(f'unknown source "{name}"; known: {listed_names([s.name for s in self.sources])}')

    def destination(self, name: str) -> DestinationConfig:
        found = self._destinations_by_name.get(name)
        if found is None:
            raise KeyError(f'unknown destination "{name}"; known: {listed_names(list(self._destinations_by_name))}')
        return found

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.model_name == name:
                return m
        raise KeyError(f'unknown model "{name}"; known: {", ".join(m.model_name for m in self.models)}')

    def recipient(self, rid: str) -> RecipientConfig:
        found = self._recipients_by_id.get(rid)
        if found is None:
            raise KeyError(f'unknown recipient "{rid}"; known: {listed_names([r.id for r in self.recipients])}')
        return found

    @cached_property
    def _recipients_by_id(self) -> dict[str, RecipientConfig]:
        return {r.id: r for r in self.recipients}

    @cached_property
    def _destinations_by_name(self) -> dict[str, DestinationConfig]:
        return {d.name: d for d in self.destinations}

    def lookback_seconds(self, model: ModelConfig) -> int:
        """Model override, else source override, else the vendor default."""
        if model.lookback_seconds is not None:
            return model.lookback_seconds
        source = self.source(model.source)
        if source.lookback_seconds is not None:
            return source.lookback_seconds
        return DEFAULT_LOOKBACK_SECONDS.get(source.vendor, FALLBACK_LOOKBACK_SECONDS)

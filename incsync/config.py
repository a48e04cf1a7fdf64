"""The configuration file: pydantic models for sources, destinations, models and recipients.

Secrets are never in the file, only the names of the environment variables that hold them.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from incsync.cron import is_valid_cron
from incsync.errors import ConfigError
from incsync.yaml_load import load_yaml
from incsync.recipients_table import read_recipient_rows, rename_row_problems
from incsync.paths import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, config_path  # noqa: F401 - re-exported


ID_PATTERN = r"^[A-Za-z0-9_-]+$"
_ID_RE = re.compile(ID_PATTERN)
_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_COLUMN_NAME = 128


def column_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a column name; None when it can. Names are used exactly as spelled (and
    quoted), so mixed case, spaces and reserved words are fine; control characters and empty names are not."""
    if not name.strip():
        return "is empty; name a column"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "holds a control character (NUL, newline, tab...); write the name as the database spells it"
    if len(name) > MAX_COLUMN_NAME:
        return f"is longer than {MAX_COLUMN_NAME} characters"
    return None


def table_name_problem(name: str, *, schema_tenanted: bool) -> str | None:
    """Why ``name`` cannot be a ``source_table``: `table` or `schema.table`, each part bare (`public.Order`,
    the case as typed) or quoted as database tools print it (`public."Order"`, `` `db`.`t` ``)."""
    from incsync.sources.sql_text import split_qualified  # the package imports this module

    parts = split_qualified(name)
    if parts is None or len(parts) > 2 or any(column_name_problem(p) for p in parts):
        return (
            "must be `table` or `schema.table`; quote a part that is not a plain word with \"\" or ``, "
            'e.g. public."Order Lines"'
        )
    if schema_tenanted and len(parts) > 1:
        return "is schema-tenanted, so name the table alone; each recipient's schema is its id_in_provider_system"
    return None

# Prequel's documented lookback defaults, by source vendor (seconds).
DEFAULT_LOOKBACK_SECONDS: dict[str, int] = {
    "athena": 300,
    "postgres": 30,
    "mysql": 5,
    "mariadb": 5,
}
FALLBACK_LOOKBACK_SECONDS = 300


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LakeSourceConfig(_Strict):
    """Folders of Parquet/CSV/JSON files (one per table) or Spark catalog tables."""

    name: str = Field(description="Source name, referenced by models.")
    vendor: Literal["lake"] = Field(description="`lake`.")
    path: str | None = Field(default=None, description="Root folder; table `t` lives in `<path>/t`.")
    format: Literal["parquet", "csv", "json", "table"] = Field(
        default="parquet",
        description="How the files are written: parquet, csv (with a header line), json, or `table` for Spark catalog tables.",
    )
    options: dict[str, str] = Field(default_factory=dict, description="Extra Spark reader options.")
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Object-store settings in delta-rs's names (aws_region, aws_endpoint_url, ...); a secret is "
        "`<name>_env: VARIABLE`, never its value (docs/storage.md).",
    )
    lookback_seconds: int | None = Field(
        default=None, ge=0,
        description="Re-read this far behind the high watermark for late rows (default 300 for lakes).",
    )
    max_concurrent_transfers: int = Field(
        default=10, ge=1,
        description="At most this many runs read this source at once (dagster.yaml run limits).",
    )
    max_concurrent_queries_per_transfer: int = Field(
        default=1, ge=1,
        description="Split one read into this many parallel key-range reads.",
    )

    @model_validator(mode="after")
    def _path_for_files(self) -> LakeSourceConfig:
        if self.format != "table" and not self.path:
            raise ValueError(f'format "{self.format}" reads files: set `path` to the folder that holds one folder per table')
        return self


class JdbcSourceConfig(_Strict):
    """A database read over Spark JDBC; the password comes from an environment variable."""

    name: str = Field(description="Source name, referenced by models.")
    vendor: Literal["postgres", "mysql", "mariadb", "athena"] = Field(description="postgres, mysql, mariadb or athena.")
    jdbc_url: str = Field(description="JDBC URL without credentials.")
    user: str | None = Field(
        default=None,
        description="Database user; read-only credentials are enough (and recommended).",
    )
    password_env: str | None = Field(default=None, description="Name of the variable holding the password.")
    driver_jar: str | None = Field(default=None, description="Path of the JDBC driver jar; default from the OS packages.")
    driver_package: str | None = Field(
        default=None, description="Maven coordinates of the JDBC driver (spark.jars.packages), where Maven is reachable."
    )
    lookback_seconds: int | None = Field(
        default=None, ge=0,
        description="Re-read this far behind the high watermark for late rows (default: PostgreSQL 30, MySQL/MariaDB 5, Athena 300).",
    )
    max_concurrent_transfers: int = Field(
        default=10, ge=1,
        description="At most this many runs read this source at once (dagster.yaml run limits).",
    )
    max_concurrent_queries_per_transfer: int = Field(
        default=1, ge=1,
        description="Split one read into this many parallel key-range queries.",
    )
    fetch_size: int = Field(default=10_000, ge=1, description="Rows per JDBC round trip.")
    safe_horizon: bool = Field(
        default=True,
        description="Hold the high watermark at the start of the oldest transaction still open at extraction "
        "(README: the safe horizon); false: the lookback alone.",
    )
    max_horizon_lag_seconds: int = Field(
        default=3600, ge=0,
        description="A transaction (or replica lag) older than this no longer holds the high watermark back; "
        "the transfer's metadata warns with its age.",
    )

    @field_validator("jdbc_url")
    @classmethod
    def _no_secret_in_url(cls, url: str) -> str:
        if not url.startswith("jdbc:"):
            raise ValueError(f'"{url.split("?")[0]}" is not a JDBC URL: it must start with "jdbc:"')
        if re.search(r"(?i)password=", url) or re.search(r"//[^/@]*:[^/@]*@", url):
            raise ValueError("the JDBC URL must not carry a password: put its variable's name in `password_env`")
        return url

    def password(self) -> SecretStr | None:
        if not self.password_env:
            return None
        value = os.environ.get(self.password_env)
        if value is None:
            raise ConfigError(
                "environment",
                [f"sources[{self.name}].password_env: variable {self.password_env} is not set; export it before running"],
            )
        return SecretStr(value)


SourceConfig = Annotated[LakeSourceConfig | JdbcSourceConfig, Field(discriminator="vendor")]


class DeltaDestinationConfig(_Strict):
    """One Delta Lake table per model under ``path`` (``<path>/<model>``)."""

    name: str = Field(description="Destination name, referenced by recipients.")
    kind: Literal["delta"] = Field(description="`delta`.")
    path: str = Field(
        description="Folder (or storage URL) of the recipient's tables; relative paths are relative to the file.",
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Object-store settings in delta-rs's names (aws_region, aws_endpoint_url, ...); a secret is "
        "`<name>_env: VARIABLE`, never its value (docs/storage.md).",
    )
    max_concurrent_transfers: int = Field(default=1, ge=1, description="At most this many runs publish here at once.")
    target_file_size: int = Field(
        default=4 << 20, ge=1 << 16,
        description="Bytes per data file (delta.targetFileSize), set when the table is created: many files let "
        "a MERGE rewrite only those holding changed keys.",
    )


class PostgresDestinationConfig(_Strict):
    """A PostgreSQL schema; the DSN comes from an environment variable."""

    name: str = Field(description="Destination name, referenced by recipients.")
    kind: Literal["postgres"] = Field(description="`postgres`.")
    dsn_env: str = Field(
        description="Name of the environment variable holding the connection string (postgresql://...).",
    )
    schema_name: str = Field(alias="schema", description="Target schema, created when missing.")
    max_concurrent_transfers: int = Field(default=1, ge=1, description="At most this many runs publish here at once.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ObjectStorageDestinationConfig(_Strict):
    """Parquet files plus manifests under a prefix."""

    name: str = Field(description="Destination name, referenced by recipients.")
    kind: Literal["object_storage"] = Field(description="`object_storage`.")
    path: str = Field(
        description="Prefix (folder or storage URL) of the Parquet files and manifests; may be shared by recipients.",
    )
    disable_manifest: bool = Field(
        default=False,
        description="Write no manifests (readers then cannot tell committed files from others).",
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Object-store settings in delta-rs's names (aws_region, aws_endpoint_url, ...); a secret is "
        "`<name>_env: VARIABLE`, never its value (docs/storage.md).",
    )
    signing_key_env: str | None = Field(
        default=None,
        description="Name of the variable holding the path of an Ed25519 PEM private key: manifests then carry "
        "`signature` and `signature_public_key` (read_manifested(public_key=...) verifies them).",
    )
    max_concurrent_transfers: int = Field(default=1, ge=1, description="At most this many runs publish here at once.")


DestinationConfig = Annotated[
    DeltaDestinationConfig | PostgresDestinationConfig | ObjectStorageDestinationConfig,
    Field(discriminator="kind"),
]


class ModelConfig(_Strict):
    """One logical table shared with every recipient."""

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
        description="`column` (one table for all tenants, split by `organization_column`) or `schema` (one schema per tenant).",
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
    frequency: str = Field(default="*/15 * * * *", description="Cron of the model's schedule (UTC).")
    lookback_seconds: int | None = Field(
        default=None, ge=0,
        description="Overrides the source's lookback for this model.",
    )
    max_rows_per_batch: int = Field(
        default=1_000_000, ge=1,
        description="A transfer over many windows is read once and committed in batches of at most this many "
        "rows, split at window boundaries (a window is never split).",
    )
    max_horizon_lag_seconds: int | None = Field(default=None, ge=0, description="Overrides the source's.")
    column_types: dict[str, str] | None = Field(
        default=None,
        description="Column -> type to read it as, overriding the faithful default (docs/types.md): text, boolean, "
        "smallint, integer, bigint, real, double, date, time or decimal(p,s).",
    )
    deletes: Literal["none", "hard", "soft"] = Field(
        default="none",
        description="Rows deleted at the source: kept (none), deleted (hard) or stamped _incsync_deleted_at (soft) "
        "in the destination, by `incsync repair` and the integrity check's repair.",
    )
    is_deleted_column: str | None = Field(
        default=None,
        description="A soft-delete flag of the source (e.g. is_deleted): transferred like any other column, so a "
        "row the source marks deleted arrives marked, with its last-modified change.",
    )
    max_delete_fraction: float = Field(
        default=0.1, ge=0, le=1,
        description="A repair that would remove more than this fraction of a recipient's rows stops unless "
        "--allow-mass-delete.",
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


class RecipientConfig(_Strict):
    """One customer: a dynamic partition key and where its copy lives."""

    id: str = Field(
        pattern=ID_PATTERN,
        description="Recipient id: letters, digits, _ and -; the recipient partition key.",
    )
    id_in_provider_system: str = Field(
        description="The recipient's tenant value (organization_column) or schema name (tenancy: schema).",
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
        description="key: value pairs carried as run tags (incsync/tag/<key>), e.g. tier: gold.",
    )

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        for key, value in tags.items():
            if not _ID_RE.match(key) or not _ID_RE.match(str(value)):
                raise ValueError(f'tag {key}={value} is invalid: keys and values must match {ID_PATTERN}')
        return tags


class RecipientsFromConfig(_Strict):
    """A table of recipients (columns: the recipient fields), read through a postgres source."""

    source: str = Field(description="A source of vendor postgres whose credentials read the table.")
    table: str = Field(description="`table` or `schema.table`.")
    refresh_seconds: int = Field(default=30, ge=0, description="Read the table again after this long (0: every time).")


class RetryPolicy(_Strict):
    """How often a source read or a destination publish is tried when it fails with a transient error."""

    attempts: int = Field(
        default=3, ge=1, le=20,
        description="Tries in all (1: no retry) of a source read or a destination publish that fails with a "
        "transient error (connection killed or reset, server restarting, serialization failure, deadlock, too "
        "many connections). Errors that cannot heal (authentication, missing table, types, validation) fail at once.",
    )
    backoff_seconds: float = Field(
        default=2.0, ge=0, le=600, description="Wait before the first retry; each later retry waits twice as long."
    )
    max_backoff_seconds: float = Field(default=30.0, ge=0, le=3600, description="The longest wait between two tries.")

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        return min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (retry - 1))


class IncsyncConfig(_Strict):
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
        description="The tables shared with every recipient: one Dagster asset each.",
    )
    recipients: list[RecipientConfig] = Field(
        default_factory=list,
        description="The customers: each gets its tenant's rows of every model in its own destination.",
    )
    staging_dir: str | None = Field(default=None, description="Root of per-transfer staging folders (a path or a URL).")
    staging_storage_options: dict[str, str] = Field(
        default_factory=dict, description="storage_options of an object-store `staging_dir` (docs/storage.md)."
    )
    recipients_from: RecipientsFromConfig | None = Field(
        default=None, description="A table of recipients, read beside the `recipients` of the file."
    )
    recipients_per_run: int = Field(
        default=256, ge=1,
        description="Schedules, the sensor and the CLI launch one run per this many recipients of a model; "
        "the run reads them with one query and publishes each recipient's rows to its own destination.",
    )
    spark: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings (spark.master, ...).")
    retries: RetryPolicy = Field(
        default_factory=RetryPolicy,
        description="Retries of source reads and destination publishes that fail with a transient error "
        "(e.g. `retries: {attempts: 3, backoff_seconds: 2}`).",
    )

    def source(self, name: str) -> SourceConfig:
        return next(s for s in self.sources if s.name == name)

    def destination(self, name: str) -> DestinationConfig:
        return self._destinations_by_name[name]

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.model_name == name:
                return m
        raise KeyError(f'unknown model "{name}"; known: {", ".join(m.model_name for m in self.models)}')

    def recipient(self, rid: str) -> RecipientConfig:
        found = self._recipients_by_id.get(rid)
        if found is None:
            known = ", ".join(r.id for r in self.recipients[:20]) + (", ..." if len(self.recipients) > 20 else "")
            raise KeyError(f'unknown recipient "{rid}"; known: {known}')
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


def _window_problem(seconds: int) -> str | None:
    if seconds < 86_400 and 86_400 % seconds == 0 and (seconds % 60 == 0):
        minutes = seconds // 60
        if minutes < 60 and 60 % minutes == 0 or minutes % 60 == 0 and 24 % (minutes // 60) == 0:
            return None
    if seconds == 86_400:
        return None
    return (
        f"{seconds} seconds cannot form a window grid; use whole minutes dividing an hour, "
        "whole hours dividing a day, or 86400 (e.g. 900, 3600, 21600, 86400)"
    )


def _cross_check(cfg: IncsyncConfig) -> list[str]:
    """Problems pydantic cannot see alone: references, names, column lists."""
    problems: list[str] = []

    def unique(section: str, names: list[str]) -> None:
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                problems.append(f'{section}[{i}]: duplicate name "{name}"; names must be unique')
            seen.add(name)

    unique("sources", [s.name for s in cfg.sources])
    unique("destinations", [d.name for d in cfg.destinations])
    unique("models", [m.model_name for m in cfg.models])
    unique("recipients", [r.id for r in cfg.recipients])
    for i, s in enumerate(cfg.sources):
        if not _ID_RE.match(s.name):
            problems.append(f'sources[{i}].name: "{s.name}" must match {ID_PATTERN}')
    for i, d in enumerate(cfg.destinations):
        if not _ID_RE.match(d.name):
            problems.append(f'destinations[{i}].name: "{d.name}" must match {ID_PATTERN}')

    from incsync.storage_names import option_problems, url_problem

    located = [(f"sources[{i}]", s) for i, s in enumerate(cfg.sources)] + [
        (f"destinations[{i}]", d) for i, d in enumerate(cfg.destinations)]
    for where, item in located:
        problems.extend(option_problems(getattr(item, "storage_options", {}), f"{where}.storage_options"))
        if problem := url_problem(getattr(item, "path", None)):
            problems.append(f"{where}.path: {problem}")
    problems.extend(option_problems(cfg.staging_storage_options, "staging_storage_options"))
    if problem := url_problem(cfg.staging_dir):
        problems.append(f"staging_dir: {problem}")

    source_names = [s.name for s in cfg.sources]
    for i, m in enumerate(cfg.models):
        where = f"models[{i}]"
        if not _IDENTIFIER_RE.match(m.model_name):
            problems.append(f'{where}.model_name: "{m.model_name}" must be a letter or _ followed by letters, digits or _')
        if m.source not in source_names:
            problems.append(f'{where}.source: "{m.source}" is not a configured source; known: [{", ".join(source_names)}]')
        if m.source_table is not None and (
            problem := table_name_problem(m.source_table, schema_tenanted=m.tenancy == "schema")
        ):
            problems.append(f'{where}.source_table: "{m.source_table}" {problem}')
        if problem := _window_problem(m.max_transfer_time_window_seconds):
            problems.append(f"{where}.max_transfer_time_window_seconds: {problem}")
        named = [*m.primary_key, m.last_modified_column, *([m.organization_column] if m.organization_column else [])]
        for col in dict.fromkeys([*(m.columns or []), *named]):
            if problem := column_name_problem(col):
                problems.append(f"{where}: column {col!r} {problem}")
        if m.columns:
            listed = ", ".join(m.columns)
            for field, cols in (
                ("primary_key", m.primary_key),
                ("last_modified_column", [m.last_modified_column]),
                ("organization_column", [m.organization_column] if m.organization_column else []),
                ("is_deleted_column", [m.is_deleted_column] if m.is_deleted_column else []),
            ):
                for col in cols:
                    if col not in m.columns:
                        problems.append(
                            f'{where}.{field}: column "{col}" is not in columns [{listed}]; fix its spelling or add it to columns'
                        )
            unique(f"{where}.columns", list(m.columns))
        problems.extend(_column_types_problems(where, m))
        if m.last_modified_timezone:
            try:
                from zoneinfo import ZoneInfo

                ZoneInfo(m.last_modified_timezone)
            except Exception:  # noqa: BLE001 - any failure means the name is unknown
                problems.append(f'{where}.last_modified_timezone: "{m.last_modified_timezone}" is not an IANA zone name')
        if not is_valid_cron(m.frequency):
            problems.append(f'{where}.frequency: "{m.frequency}" is not a cron expression (e.g. "*/15 * * * *")')

    destination_names = [d.name for d in cfg.destinations]
    kinds = {d.name: d.kind for d in cfg.destinations}
    users: dict[str, list[str]] = {}
    for r in cfg.recipients:
        users.setdefault(r.destination, {})[r.id] = None  # ordered, and O(1) per recipient at 10,000
    users = {name: list(ids) for name, ids in users.items()}
    for i, d in enumerate(cfg.destinations):
        # A Delta table root or PostgreSQL schema holds one recipient's copy: tables are keyed on the
        # primary key alone, so a second tenant would merge into (and full refreshes would wipe) the first.
        if kinds[d.name] in ("delta", "postgres") and len(users.get(d.name, [])) > 1:
            problems.append(
                f'destinations[{i}]: "{d.name}" is used by recipients {", ".join(users[d.name])}; a {d.kind} '
                "destination holds one recipient's copy, so give each recipient its own (object_storage may be shared)"
            )
    known_destinations = set(destination_names)
    for i, r in enumerate(cfg.recipients):
        if r.destination not in known_destinations:
            problems.append(
                f'recipients[{i}].destination: "{r.destination}" is not a configured destination; '
                f'known: [{", ".join(destination_names)}]'
            )
    from incsync.spark_cluster import cluster_problems

    problems += cluster_problems(cfg.spark)
    return problems


def _column_types_problems(where: str, m: ModelConfig) -> list[str]:
    if not m.column_types:
        return []  # no type map to check: skip importing it (pyarrow), which a plain config never needs here
    from incsync.typemap import OVERRIDE_HELP, override_arrow

    problems = []
    for col, kind in (m.column_types or {}).items():
        if problem := column_name_problem(col):
            problems.append(f"{where}.column_types: column {col!r} {problem}")
        elif col == m.last_modified_column:
            problems.append(f'{where}.column_types: "{col}" is the last_modified_column, which is read as a timestamp; remove it')
        elif m.columns and col not in m.columns:
            problems.append(f'{where}.column_types: column "{col}" is not in columns [{", ".join(m.columns)}]')
        if not isinstance(kind, str) or override_arrow(kind) is None:
            problems.append(f'{where}.column_types.{col}: "{kind}" is not a type incsync reads as; use {OVERRIDE_HELP}')
    return problems


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("lake", "postgres", "mysql", "mariadb", "athena", "delta", "object_storage") or str(part).startswith(
            ("function-", "tagged-union")
        ):
            continue  # discriminated-union branch names say nothing to the user
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


_KINDS = {"vendor": ["lake", "postgres", "mysql", "mariadb", "athena"], "kind": ["delta", "postgres", "object_storage"]}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed where ``loc`` points (for 'did you mean')."""
    section = next((p for p in loc if isinstance(p, str)), None)
    kinds = {
        "sources": [LakeSourceConfig, JdbcSourceConfig],
        "destinations": [DeltaDestinationConfig, PostgresDestinationConfig, ObjectStorageDestinationConfig],
        "models": [ModelConfig], "recipients": [RecipientConfig], "recipients_from": [RecipientsFromConfig],
    }.get(section or "", [])
    depth = sum(1 for p in loc if not isinstance(p, int))
    if depth <= 1:
        kinds = [IncsyncConfig]
    names: list[str] = []
    for kind in kinds:
        for name, field in kind.model_fields.items():
            names.append(field.alias or name)
    return names


def _pydantic_message(err: Any) -> str:
    """pydantic's error in the file's terms: what is wrong and the fix, never pydantic's own wording."""
    kind, loc, given = err["type"], err["loc"], err.get("input")
    ctx = err.get("ctx") or {}
    shown = given if isinstance(given, str | int | float | bool) else None
    if kind == "extra_forbidden":
        import difflib

        close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc), n=1)
        hint = f'did you mean "{close[0]}"?' if close else "remove it, or see docs/config.md for the fields"
        return f"unknown field; {hint}"
    if kind == "missing":
        return "required field is missing; add it (docs/config.md lists every field)"
    if kind == "string_pattern_mismatch":
        return f'"{given}" must match {ctx.get("pattern")} (letters, digits, _ and - only)'
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tag = ctx.get("discriminator", "").strip("'") or ("vendor" if loc and loc[0] == "sources" else "kind")
        allowed = ", ".join(_KINDS.get(tag, []))
        if kind == "union_tag_not_found":
            return f"`{tag}` is missing; set it to one of {allowed}"
        return f'{tag} "{ctx.get("tag")}" is unknown; use one of {allowed}'
    if kind == "literal_error":
        return f'"{shown}" is not allowed; use one of {ctx.get("expected")}'
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f'expected a whole number, got "{shown}"' if shown is not None else "expected a whole number"
    if kind in ("bool_parsing", "bool_type"):
        return f'expected true or false, got "{shown}"' if shown is not None else "expected true or false"
    if kind in ("string_type",):
        return "expected text; quote it" if shown is not None else "expected text"
    if kind in ("list_type", "tuple_type"):
        return "expected a list, e.g. [a, b] or one `- item` per line"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a mapping of `key: value` lines"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        limit = next(iter(ctx.values()), "?")
        return f"{shown} is out of range; it must be {sign} {limit}"
    if kind == "too_short":
        return "is empty; list at least one"
    if kind in ("value_error", "assertion_error"):
        return err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return f"{err['msg'][0].lower()}{err['msg'][1:]}"


def parse_config(data: Any, *, path: str = "<memory>", base: Path | None = None) -> IncsyncConfig:
    """Validate a loaded YAML document; raise ConfigError with every problem at once.

    ``base`` is the folder relative paths are taken against (the file's; default the working directory).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, ["(top level): expected a mapping with sources, destinations, models, recipients"])
    try:
        cfg = IncsyncConfig.model_validate(data)
    except PydanticValidationError as exc:
        problems = [f"{_format_loc(err['loc'])}: {_pydantic_message(err)}" for err in exc.errors()]
        raise ConfigError(path, problems) from None
    from incsync.limits import length_problems

    problems = _cross_check(cfg) + length_problems(cfg)
    if not problems:
        from incsync.locations import shared_location_problems

        problems = shared_location_problems(cfg, base or Path.cwd())
    if problems:
        raise ConfigError(path, problems)
    return cfg


def load_config(path: str | os.PathLike[str] | None = None) -> IncsyncConfig:
    """Read and validate the file named by ``path``, ``$INCSYNC_CONFIG`` or ``incsync.yaml``.

    Relative lake and destination paths are resolved against the file's folder.
    """
    file = config_path(path)
    if not file.exists():
        raise ConfigError(str(file), [f"file not found; create it or point {CONFIG_ENV_VAR} at it"])
    text = file.read_text()
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(str(file), exc) from None
    try:
        return _load_parsed(file, data)
    except ConfigError as exc:
        if exc.path != str(file) or any(exc.lines):
            raise
        from incsync.config_lines import problem_lines

        raise ConfigError(exc.path, exc.problems, problem_lines(text, exc.problems)) from None


def _yaml_error(path: str, exc: yaml.YAMLError) -> ConfigError:
    """A YAML syntax error at its line in the file (PyYAML's own text cites "<unicode string>")."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = " ".join(filter(None, [getattr(exc, "context", None), getattr(exc, "problem", None)])) or str(exc)
    problem = (f"not valid YAML: {what}; check the indentation and quoting at column {mark.column + 1}" if mark
               else f"not valid YAML: {what}")
    return ConfigError(path, [problem], [mark.line + 1 if mark else None])


def _load_parsed(file: Path, data: Any) -> IncsyncConfig:
    rows = read_recipient_rows(data, path=str(file)) if isinstance(data, dict) else []
    if rows:
        first_row = len(data.get("recipients") or [])
        data = {**data, "recipients": [*(data.get("recipients") or []), *rows]}
        try:
            cfg = parse_config(data, path=str(file), base=file.resolve().parent)
        except ConfigError as exc:
            table = str(data["recipients_from"]["table"])
            ids = [str(r.get("id")) for r in rows]
            raise ConfigError(exc.path, rename_row_problems(exc.problems, first_row=first_row, table=table, ids=ids)) from None
    else:
        cfg = parse_config(data, path=str(file), base=file.resolve().parent)
    return _resolve_paths(cfg, file.resolve().parent)


def _resolve_paths(cfg: IncsyncConfig, base: Path) -> IncsyncConfig:
    def resolve(p: str | None) -> str | None:
        if p is None or "://" in p or os.path.isabs(p):
            return p
        return os.path.normpath(os.path.join(base, p))  # no per-path stat: cheap for 10,000 destinations

    sources = [s.model_copy(update={"path": resolve(s.path)}) if isinstance(s, LakeSourceConfig) else s for s in cfg.sources]
    destinations = [
        d.model_copy(update={"path": resolve(d.path)}) if hasattr(d, "path") else d for d in cfg.destinations
    ]
    return cfg.model_copy(
        update={"sources": sources, "destinations": destinations, "staging_dir": resolve(cfg.staging_dir)}
    )

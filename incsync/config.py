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

from incsync.errors import ConfigError
from incsync.recipients_table import read_recipient_rows, rename_row_problems
from incsync.paths import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, config_path  # noqa: F401 - re-exported


ID_PATTERN = r"^[A-Za-z0-9_-]+$"
_ID_RE = re.compile(ID_PATTERN)
_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUALIFIED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")

# Prequel's documented lookback defaults, by source vendor (seconds).
DEFAULT_LOOKBACK_SECONDS: dict[str, int] = {
    "athena": 300,
    "postgres": 30,
    "mysql": 5,
    "mariadb": 5,
}
FALLBACK_LOOKBACK_SECONDS = 300
# libyaml's safe loader parses a 10,000-recipient file ~5x faster than the pure-Python one.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LakeSourceConfig(_Strict):
    """Folders of Parquet/CSV/JSON files (one per table) or Spark catalog tables."""

    name: str = Field(description="Source name, referenced by models.")
    vendor: Literal["lake"]
    path: str | None = Field(default=None, description="Root folder; table `t` lives in `<path>/t`.")
    format: Literal["parquet", "csv", "json", "table"] = "parquet"
    options: dict[str, str] = Field(default_factory=dict, description="Extra Spark reader options.")
    lookback_seconds: int | None = Field(default=None, ge=0)
    max_concurrent_transfers: int = Field(default=10, ge=1)
    max_concurrent_queries_per_transfer: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _path_for_files(self) -> LakeSourceConfig:
        if self.format != "table" and not self.path:
            raise ValueError(f'format "{self.format}" reads files: set `path` to the folder that holds one folder per table')
        return self


class JdbcSourceConfig(_Strict):
    """A database read over Spark JDBC; the password comes from an environment variable."""

    name: str
    vendor: Literal["postgres", "mysql", "mariadb", "athena"]
    jdbc_url: str = Field(description="JDBC URL without credentials.")
    user: str | None = None
    password_env: str | None = Field(default=None, description="Name of the variable holding the password.")
    driver_jar: str | None = Field(default=None, description="Path of the JDBC driver jar; default from the OS packages.")
    driver_package: str | None = Field(
        default=None, description="Maven coordinates of the JDBC driver (spark.jars.packages), where Maven is reachable."
    )
    lookback_seconds: int | None = Field(default=None, ge=0)
    max_concurrent_transfers: int = Field(default=10, ge=1)
    max_concurrent_queries_per_transfer: int = Field(default=1, ge=1)
    fetch_size: int = Field(default=10_000, ge=1)
    safe_horizon: bool = Field(
        default=True,
        description="Hold the high watermark at the start of the oldest transaction still open at extraction "
        "(DESIGN step 6); false: the lookback alone.",
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

    name: str
    kind: Literal["delta"]
    path: str
    max_concurrent_transfers: int = Field(default=1, ge=1)
    target_file_size: int = Field(
        default=4 << 20, ge=1 << 16,
        description="Bytes per data file (delta.targetFileSize), set when the table is created: many files let "
        "a MERGE rewrite only those holding changed keys.",
    )


class PostgresDestinationConfig(_Strict):
    """A PostgreSQL schema; the DSN comes from an environment variable."""

    name: str
    kind: Literal["postgres"]
    dsn_env: str
    schema_name: str = Field(alias="schema", description="Target schema, created when missing.")
    max_concurrent_transfers: int = Field(default=1, ge=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ObjectStorageDestinationConfig(_Strict):
    """Parquet files plus manifests under a prefix."""

    name: str
    kind: Literal["object_storage"]
    path: str
    disable_manifest: bool = False
    max_concurrent_transfers: int = Field(default=1, ge=1)


DestinationConfig = Annotated[
    DeltaDestinationConfig | PostgresDestinationConfig | ObjectStorageDestinationConfig,
    Field(discriminator="kind"),
]


class ModelConfig(_Strict):
    """One logical table shared with every recipient."""

    model_name: str
    source: str
    source_table: str | None = None
    source_query: str | None = None
    columns: list[str] | None = Field(default=None, description="Columns to transfer; default: all.")
    primary_key: list[str] = Field(min_length=1)
    last_modified_column: str
    organization_column: str | None = None
    tenancy: Literal["column", "schema"] = "column"
    last_modified_timezone: str | None = Field(
        default=None, description="IANA zone of a last-modified column stored without zone."
    )
    max_transfer_time_window_seconds: int = Field(default=86_400, gt=0)
    min_start_time_epoch: int = Field(ge=0)
    frequency: str = "*/15 * * * *"
    lookback_seconds: int | None = Field(default=None, ge=0)
    max_rows_per_batch: int = Field(
        default=1_000_000, ge=1,
        description="A transfer over many windows is read once and committed in batches of at most this many "
        "rows, split at window boundaries (a window is never split).",
    )
    max_horizon_lag_seconds: int | None = Field(default=None, ge=0, description="Overrides the source's.")

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

    id: str = Field(pattern=ID_PATTERN)
    id_in_provider_system: str
    destination: str
    default_full_refresh_min_start_time_epoch: int | None = Field(default=None, ge=0)
    enabled: bool = True
    tags: dict[str, str] = Field(default_factory=dict)

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


class IncsyncConfig(_Strict):
    """The whole file."""

    sources: list[SourceConfig] = Field(default_factory=list)
    destinations: list[DestinationConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    recipients: list[RecipientConfig] = Field(default_factory=list)
    staging_dir: str | None = Field(default=None, description="Root of per-transfer staging folders.")
    recipients_from: RecipientsFromConfig | None = Field(
        default=None, description="A table of recipients, read beside the `recipients` of the file."
    )
    recipients_per_run: int = Field(
        default=256, ge=1,
        description="Schedules, the sensor and the CLI launch one run per this many recipients of a model; "
        "the run reads them with one query and publishes each recipient's rows to its own destination.",
    )
    spark: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings (spark.master, ...).")

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

    source_names = [s.name for s in cfg.sources]
    for i, m in enumerate(cfg.models):
        where = f"models[{i}]"
        if not _IDENTIFIER_RE.match(m.model_name):
            problems.append(f'{where}.model_name: "{m.model_name}" must be a letter or _ followed by letters, digits or _')
        if m.source not in source_names:
            problems.append(f'{where}.source: "{m.source}" is not a configured source; known: [{", ".join(source_names)}]')
        if m.source_table is not None and not _QUALIFIED_RE.match(m.source_table):
            problems.append(f'{where}.source_table: "{m.source_table}" must be `table` or `schema.table`')
        if m.tenancy == "schema" and m.source_table is not None and "." in m.source_table:
            problems.append(
                f'{where}.source_table: "{m.source_table}" is schema-tenanted, so name the table alone; '
                "each recipient's schema is its id_in_provider_system"
            )
        if problem := _window_problem(m.max_transfer_time_window_seconds):
            problems.append(f"{where}.max_transfer_time_window_seconds: {problem}")
        named = [*m.primary_key, m.last_modified_column, *([m.organization_column] if m.organization_column else [])]
        for col in [*(m.columns or []), *named]:
            if not _IDENTIFIER_RE.match(col):
                problems.append(f'{where}: column "{col}" is not a plain identifier (letters, digits, _)')
        if m.columns:
            listed = ", ".join(m.columns)
            for field, cols in (
                ("primary_key", m.primary_key),
                ("last_modified_column", [m.last_modified_column]),
                ("organization_column", [m.organization_column] if m.organization_column else []),
            ):
                for col in cols:
                    if col not in m.columns:
                        problems.append(f'{where}.{field}: column "{col}" is not in columns [{listed}]')
            unique(f"{where}.columns", list(m.columns))
        if m.last_modified_timezone:
            try:
                from zoneinfo import ZoneInfo

                ZoneInfo(m.last_modified_timezone)
            except Exception:  # noqa: BLE001 - any failure means the name is unknown
                problems.append(f'{where}.last_modified_timezone: "{m.last_modified_timezone}" is not an IANA zone name')
        try:
            from dagster._utils.schedules import is_valid_cron_string

            if not is_valid_cron_string(m.frequency):
                problems.append(f'{where}.frequency: "{m.frequency}" is not a cron expression (e.g. "*/15 * * * *")')
        except ImportError:  # pragma: no cover - dagster is a dependency
            pass

    destination_names = [d.name for d in cfg.destinations]
    kinds = {d.name: d.kind for d in cfg.destinations}
    users: dict[str, list[str]] = {}
    for r in cfg.recipients:
        users.setdefault(r.destination, [])
        if r.id not in users[r.destination]:
            users[r.destination].append(r.id)
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
        problems = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field; remove it or check its spelling against DESIGN.md"
            elif err["type"] == "missing":
                msg = "required field is missing"
            elif err["type"] == "string_pattern_mismatch":
                msg = f'"{err["input"]}" must match {err["ctx"]["pattern"]} (letters, digits, _ and - only)'
            problems.append(f"{_format_loc(err['loc'])}: {msg}")
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
    try:
        data = yaml.load(file.read_text(), Loader=_YAML_LOADER)  # noqa: S506 - a safe loader, in C when built
    except yaml.YAMLError as exc:
        raise ConfigError(str(file), [f"not valid YAML: {exc}"]) from None
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

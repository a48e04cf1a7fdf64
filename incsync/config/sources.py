"""The file's sources: lake folders or databases read over JDBC (``vendor`` chooses), and their lookback defaults."""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from incsync.config.base import StrictModel
from incsync.errors import ConfigError

# Prequel's documented lookback defaults, by source vendor (seconds).
DEFAULT_LOOKBACK_SECONDS: dict[str, int] = {
    "postgres": 30,
    "mysql": 5,
    "mariadb": 5,
}
FALLBACK_LOOKBACK_SECONDS = 300


class LakeSourceConfig(StrictModel):
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


class JdbcSourceConfig(StrictModel):
    """A database read over Spark JDBC; the password comes from an environment variable."""

    name: str = Field(description="Source name, referenced by models.")
    vendor: Literal["postgres", "mysql", "mariadb"] = Field(description="postgres, mysql or mariadb.")
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
        description="Re-read this far behind the high watermark for late rows (default: PostgreSQL 30, MySQL/MariaDB 5).",
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

"""The file's destinations: Delta tables, a PostgreSQL schema, Parquet files with manifests, a DuckDB file,
Apache Iceberg tables or a MariaDB/MySQL database (``kind`` chooses)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from incsync.config.locations import LOOPBACK, Location, folder_or_url, postgres_location, resolved_path
from incsync.config.placed import Placed
from incsync.config.secrets import REF_HELP, SecretField, SecretRef


class DeltaDestinationConfig(Placed):
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
    retention_hours: int = Field(
        default=168, ge=0,
        description="`incsync maintain` keeps the files an older table version still reads for this long after a "
        "later commit replaced them (Delta's default, 7 days): a reader of any version younger than that never "
        "fails; files older than that are deleted (vacuum).",
    )
    change_data_feed: bool = Field(
        default=False,
        description="Keep Delta's change data feed (`delta.enableChangeDataFeed`), set when a table is created: "
        "share readers can then read the rows changed between two versions (docs/sharing.md), for a "
        "`_change_data` file per MERGE.",
    )

    def drop_hint(self, model: str, recipient: str) -> str:
        return f"delete the Delta table folder {self.path.rstrip('/')}/{model}"


class PostgresDestinationConfig(Placed):
    """A PostgreSQL schema; the DSN comes from an environment variable or the vault."""

    name: str = Field(description="Destination name, referenced by recipients.")
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
    max_concurrent_transfers: int = Field(default=1, ge=1, description="At most this many runs publish here at once.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    secret_field: ClassVar[str | None] = "dsn_secret"

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


class ObjectStorageDestinationConfig(Placed):
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
    target_file_size: int = Field(
        default=128 << 20, ge=1 << 16,
        description="Bytes per data file of the snapshot `incsync maintain` writes of each recipient's live rows.",
    )
    retention_hours: int = Field(
        default=168, ge=0,
        description="`incsync maintain` keeps the manifests and files a snapshot (or full refresh) superseded for "
        "this long after it (Delta's default, 7 days): a reader that listed the manifests before it never fails; "
        "older ones are deleted (vacuum).",
    )

    shares_location: ClassVar[bool] = True  # one prefix, keys per recipient

    def drop_hint(self, model: str, recipient: str) -> str:
        root = self.path.rstrip("/")
        return (f"delete {root}/{model}/recipient={recipient}/ and the manifests of recipient {recipient} under "
                f"{root}/_manifests/{model}/")


class DuckDBDestinationConfig(Placed):
    """A DuckDB database file: one table per model in `schema`, the transfer log beside them."""

    name: str = Field(description="Destination name, referenced by recipients.")
    kind: Literal["duckdb"] = Field(description="`duckdb`.")
    path: str = Field(
        description="The database file (created when missing); relative paths are relative to the file. One "
        "recipient's copy: DuckDB lets one process write a file at a time.",
    )
    schema_name: str = Field(default="main", alias="schema", description="Schema of the tables, created when missing.")
    max_concurrent_transfers: int = Field(default=1, ge=1, le=1, description="DuckDB has one writer per file: 1.")
    lock_timeout_seconds: float = Field(
        default=30.0, ge=0, le=3600,
        description="How long a transfer waits, trying again with backoff, while another process holds the file "
        "open (a recipient's reader polling it) before it fails; 0: fail at once.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        key = resolved_path(self.path, base, _folders=folders)  # one file may hold several schemas: (file, schema)
        return Location("duckdb", f"{key}::{self.schema_name}", f"DuckDB file {key} schema {self.schema_name}")

    def described(self) -> str:
        return f"{self.path} schema {self.schema_name}"

    def drop_hint(self, model: str, recipient: str) -> str:
        return f'run DROP TABLE "{self.schema_name}"."{model}" there'


class IcebergDestinationConfig(Placed):
    """Apache Iceberg tables through pyiceberg: one table per model in `namespace` of a SQL (or REST) catalog."""

    name: str = Field(description="Destination name, referenced by recipients.")
    kind: Literal["iceberg"] = Field(description="`iceberg`.")
    path: str = Field(
        description="The warehouse: folder (or s3:// URL) of the tables' data and metadata files; relative paths "
        "are relative to the file.",
    )
    namespace: str = Field(default="incsync", description="Catalog namespace of the tables, created when missing.")
    catalog: Literal["sql", "rest"] = Field(
        default="sql",
        description="`sql`: a SQLAlchemy catalog database (SQLite, PostgreSQL); `rest`: an Iceberg REST catalog.",
    )
    catalog_uri_env: str | None = Field(
        default=None,
        description="Name of the variable holding the catalog URI (`postgresql+psycopg2://...` for a PostgreSQL "
        "catalog, `https://...` for REST); default: the SQLite file `<path>/catalog.db`.",
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Object-store settings in delta-rs's names (aws_region, aws_endpoint_url, ...), passed to "
        "pyiceberg as its s3.* properties; a secret is `<name>_env: VARIABLE`, never its value (docs/storage.md).",
    )
    max_concurrent_transfers: int = Field(default=1, ge=1, description="At most this many runs publish here at once.")
    retention_hours: int = Field(
        default=168, ge=0,
        description="`incsync maintain` expires snapshots older than this (the current one always stays), so "
        "time travel reaches back this far.",
    )

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        # A copy is a (catalog, namespace); the default catalog lives in the warehouse.
        catalog = self.catalog_uri_env
        key = f"env:{catalog}" if catalog else folder_or_url(self.path, base, folders=folders)
        shown = f"Iceberg catalog {'$' + catalog if catalog else key} namespace {self.namespace}"
        return Location("iceberg", f"{key}::{self.namespace}", shown)


class MariaDBDestinationConfig(Placed):
    """A MariaDB (or MySQL) database: one InnoDB table per model, the transfer log beside them; the password
    comes from an environment variable or the vault."""

    name: str = Field(description="Destination name, referenced by recipients.")
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
    max_concurrent_transfers: int = Field(default=1, ge=1, description="At most this many runs publish here at once.")

    secret_field: ClassVar[str | None] = "password_secret"

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


DestinationConfig = Annotated[
    DeltaDestinationConfig | PostgresDestinationConfig | ObjectStorageDestinationConfig | DuckDBDestinationConfig
    | IcebergDestinationConfig | MariaDBDestinationConfig,
    Field(discriminator="kind"),
]


def secret_fields() -> dict[str, str]:
    """kind -> the field a destinations table's `secret` column fills, for the kinds that take one."""
    kinds = typing.get_args(typing.get_args(DestinationConfig)[0])
    return {kind: cls.secret_field for cls in kinds if cls.secret_field
            for kind in typing.get_args(cls.model_fields["kind"].annotation)}

"""Reaching one database over JDBC: its driver, Spark's reader options, the password kept out of logs,
read-only psycopg sessions beside Spark, and every driver failure told as one clear ``SourceError``."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.config.sources import JdbcSourceConfig
from incsync.core.schema_names import schema_name_problem, shown
from incsync.core.vendor_sql import DRIVERS, dialect_for
from incsync.errors import ConfigError, SourceError, root_cause, sanitize
from incsync.sources.jdbc.errors import url_without_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def driver_jars(sources: Sequence[object]) -> list[str]:
    """Jars named by JDBC sources' ``driver_jar``: they must be on Spark's classpath when the JVM starts."""
    return [s.driver_jar for s in sources if isinstance(s, JdbcSourceConfig) and s.driver_jar]


def driver_packages(sources: Sequence[object]) -> list[str]:
    """Maven coordinates of JDBC drivers (``spark.jars.packages``), for networks that reach Maven."""
    return [s.driver_package for s in sources if isinstance(s, JdbcSourceConfig) and s.driver_package]


class JdbcConnection:
    """One database's connection settings; ``JdbcSource`` reads through them."""

    def __init__(self, config: JdbcSourceConfig) -> None:
        self.config = config
        self.vendor = config.vendor
        self.dialect = dialect_for(config.vendor)
        self.driver = DRIVERS[config.vendor]

    def schema_of(self, model: ModelConfig, recipient: RecipientConfig) -> str | None:
        """The recipient's schema under schema tenancy, exactly as written (every use quotes it); None otherwise."""
        if model.tenancy != "schema":
            return None
        schema = recipient.id_in_provider_system
        if problem := schema_name_problem(self.vendor, schema, source_query=model.source_query is not None):
            raise ConfigError(
                "recipients",
                [f"{recipient.id}.id_in_provider_system: schema {shown(schema)} of schema-tenanted model {model.model_name} "
                 f"(source {self.config.name}, {self.vendor}) {problem}"],
            )
        return schema

    def jdbc_options(self, model: ModelConfig, recipient: RecipientConfig) -> dict[str, str]:
        return self._options(self.schema_of(model, recipient))

    def rehearsal_read(self, spark: SparkSession, rows: int) -> DataFrame:
        """``rows`` generated rows read through this source's JDBC driver, no table read (``Dialect.rehearsal``):
        a resident worker stages them once when it starts, so its first transfer runs through a warm JVM."""
        return self.load_query(spark, self.dialect.rehearsal(rows), self._options(None), what="the worker's warm-up read")

    def _options(self, schema: str | None) -> dict[str, str]:
        cfg = self.config
        if cfg.driver_jar and not Path(cfg.driver_jar).exists():
            raise SourceError(
                f"source {cfg.name}: driver_jar {cfg.driver_jar} does not exist; install {self.driver.package} "
                "or point `driver_jar` at the vendor's JDBC driver jar"
            )
        options = {
            "url": self.dialect.url(cfg.jdbc_url, schema),
            "driver": self.driver.class_name,
            "fetchsize": str(cfg.fetch_size),
            "preferTimestampNTZ": "true",
            "pushDownPredicate": "false",
            **self.dialect.properties(schema),
        }
        if cfg.user:
            options["user"] = cfg.user
        return options

    def _secrets(self) -> list[str]:
        password = self.config.password()
        return [password.get_secret_value()] if password and password.get_secret_value() else []

    def load_query(
        self, spark: SparkSession, sql: str, options: dict[str, str], *, what: str, extra: dict[str, str] | None = None,
    ) -> DataFrame:
        reader = spark.read.format("jdbc").options(**options, **(extra or {}))
        password = self.config.password()
        try:
            if password is not None:
                # A reader option (a connection property), never the URL or the Spark conf; py4j's
                # DEBUG log prints every command's arguments, so it is kept quiet meanwhile.
                with _quiet_py4j():
                    reader = reader.option("password", password.get_secret_value())
            df = reader.option("dbtable", f"({sql}) incsync_src").load()
            df.schema  # noqa: B018 - Spark Connect resolves lazily: connect (and fail) here, not later
            return df
        except Exception as exc:  # noqa: BLE001 - every driver failure becomes one clear SourceError
            raise self.source_error(exc, what=what) from None

    @contextmanager
    def pg_connect(self, target: dict[str, object], schema: str | None) -> Iterator[object]:
        """A read-only psycopg session in UTC (``search_path`` = the recipient's schema under schema tenancy)."""
        import psycopg

        password = self.config.password()
        with psycopg.connect(
            **target, user=self.config.user, password=password.get_secret_value() if password else None,
            connect_timeout=10, autocommit=True, application_name="incsync",
            options="-c default_transaction_read_only=on",
        ) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            if schema:  # a statement, not a connection option: libpq's options would split a name at its spaces
                conn.execute(f"SET search_path TO {self.dialect.ident(schema)}")
            yield conn

    def source_error(self, exc: BaseException, *, what: str) -> SourceError:
        """One line naming the source, the model/recipient, the cause and the fix; secrets removed."""
        cfg = self.config
        detail = sanitize(root_cause(exc), self._secrets())
        lowered = detail.lower()
        if "classnotfoundexception" in lowered or "no suitable driver" in lowered:
            fix = (
                f"JDBC driver {self.driver.class_name} is not on Spark's classpath; install {self.driver.package} "
                "(scripts/system-deps.sh) or set `driver_jar`, then restart so Spark starts with it"
            )
            return SourceError(f"source {cfg.name}: {what}: {fix}")
        if any(s in lowered for s in ("password authentication failed", "access denied", "role \"", "authentication")):
            fix = f"check `user` ({cfg.user}) and the password in the variable named by `password_env` ({cfg.password_env})"
        elif any(s in lowered for s in ("unknownhost", "connection refused", "connection attempt failed", "could not connect",
                                        "socket fail", "timed out", "connect timed")):
            fix = f"check the host and port in `jdbc_url` ({sanitize(url_without_query(cfg.jdbc_url), [])}) and that the server is up"
        elif any(s in lowered for s in ("does not exist", "doesn't exist", "unknown database", "unknown column", "unknown table")):
            fix = "check the model's source_table/source_query, columns and (schema tenancy) the recipient's schema"
        elif "permission denied" in lowered or "command denied" in lowered:
            fix = f"grant SELECT on the model's table to `user` ({cfg.user})"
        else:
            fix = "see the cause above"
        return SourceError(f"source {cfg.name}: {what}: {detail}; {fix}")


@contextmanager
def _quiet_py4j() -> Iterator[None]:
    logger = logging.getLogger("py4j")
    level = logger.level
    logger.setLevel(max(logging.INFO, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        logger.setLevel(level)


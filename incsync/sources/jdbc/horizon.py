"""A database source's safe horizon: its clock and its oldest open transaction, asked in one query.

PostgreSQL: ``now()`` and the oldest ``pg_stat_activity.xact_start`` of the other sessions in this
database (``now()`` inside a transaction is its start, and a row it writes may carry it); needs
``pg_read_all_stats`` to see other roles' sessions. On a replica: the replay lag instead (a standby's
own sessions cannot write, and the primary's are not visible there).
MySQL/MariaDB: ``NOW(6)`` and the oldest ``information_schema.innodb_trx.trx_started``; needs ``PROCESS``.
Without the grant the transfer falls back to the lookback alone and says so (``horizon: lookback-only``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.bounds import from_micros
from incsync.core.horizon import LOOKBACK_ONLY, OFF, REPLICA, TRANSACTIONS, SourceHorizon
from incsync.core.vendor_sql import postgres_target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from incsync.sources.jdbc.connect import JdbcConnection

log = logging.getLogger(__name__)

# Sessions that never write rows: autovacuum, WAL senders, and incsync's own read-only connections
# (Spark JDBC and the count probe connect as ApplicationName/application_name "incsync").
POSTGRES_HORIZON_SQL = """SELECT
  (extract(epoch FROM now()) * 1000000)::bigint AS now_us,
  (extract(epoch FROM o.oldest) * 1000000)::bigint AS oldest_us,
  (extract(epoch FROM o.held) * 1000000)::bigint AS held_us,
  pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS sees_all,
  pg_is_in_recovery() AS replica,
  CASE WHEN NOT pg_is_in_recovery() THEN NULL
       WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
       ELSE (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000000)::bigint END AS replica_lag_us
FROM (
  SELECT min(a.xact_start) AS oldest,
         min(a.xact_start) FILTER (WHERE a.xact_start >= now() - make_interval(secs => {max_lag})) AS held
  FROM pg_stat_activity a
  WHERE a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL AND a.datname = current_database()
    AND a.backend_type NOT IN ('autovacuum worker', 'walsender')
    AND a.application_name IS DISTINCT FROM 'incsync'
) o"""

POSTGRES_CLOCK_SQL = "SELECT (extract(epoch FROM now()) * 1000000)::bigint AS now_us"

# The age is computed in the database, so the session's time zone cannot shift it; trx_started has
# whole seconds (rounded down: earlier, the safe side).
MYSQL_HORIZON_SQL = """SELECT
  CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us,
  (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(t.trx_started), NOW(6)) FROM information_schema.innodb_trx t
   WHERE t.trx_mysql_thread_id <> CONNECTION_ID()) AS oldest_age_us,
  (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(t.trx_started), NOW(6)) FROM information_schema.innodb_trx t
   WHERE t.trx_mysql_thread_id <> CONNECTION_ID() AND t.trx_started >= NOW(6) - INTERVAL {max_lag_rounded} SECOND) AS held_age_us"""
MYSQL_CLOCK_SQL = "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us"
# InnoDB refreshes the INNODB_TRX table from a cache at most every 100 ms: a transaction begun in the
# last 100 ms may be missing, so the HW stays that much behind the extraction's start.
INNODB_TRX_CACHE = timedelta(milliseconds=100)


def postgres_grant_note(user: str | None) -> str:
    who = user or "the source user"
    return (
        f"{who} cannot see other sessions' transactions, so the high watermark is held back by the lookback alone; "
        f"GRANT pg_read_all_stats TO {who} (or set `safe_horizon: false` to accept the lookback alone)"
    )


def mysql_grant_note(user: str | None) -> str:
    who = user or "the source user"
    return (
        f"{who} cannot see other sessions' transactions, so the high watermark is held back by the lookback alone; "
        f"GRANT PROCESS ON *.* TO {who} (or set `safe_horizon: false` to accept the lookback alone)"
    )


def postgres_horizon(row: dict[str, Any], *, user: str | None, max_lag_seconds: int) -> SourceHorizon:
    """Read the PostgreSQL horizon query's row."""
    start = from_micros(int(row["now_us"]))
    if row["replica"]:
        lag = row["replica_lag_us"]
        return SourceHorizon(
            extraction_start=start, mode=REPLICA, replica_lag_seconds=None if lag is None else int(lag) / 1e6,
            max_lag_seconds=max_lag_seconds,
        )
    if not row["sees_all"]:
        return SourceHorizon(extraction_start=start, mode=LOOKBACK_ONLY, max_lag_seconds=max_lag_seconds, note=postgres_grant_note(user))
    oldest, held = row["oldest_us"], row.get("held_us")
    return SourceHorizon(
        extraction_start=start, mode=TRANSACTIONS, oldest_open=None if oldest is None else from_micros(int(oldest)),
        oldest_within_lag=None if held is None else from_micros(int(held)), max_lag_seconds=max_lag_seconds,
    )


def mysql_horizon(row: dict[str, Any], *, max_lag_seconds: int) -> SourceHorizon:
    """Read the MySQL/MariaDB horizon query's row."""
    now = from_micros(int(row["now_us"]))
    age, held_age = row["oldest_age_us"], row.get("held_age_us")
    oldest = None if age is None else now - timedelta(microseconds=int(age))
    held = None if held_age is None else now - timedelta(microseconds=int(held_age))
    return SourceHorizon(
        extraction_start=now, mode=TRANSACTIONS, oldest_open=oldest, oldest_within_lag=held,
        max_lag_seconds=max_lag_seconds, unlisted_seconds=INNODB_TRX_CACHE.total_seconds(),
    )


def source_horizon(
    source: JdbcConnection, spark: Callable[[], SparkSession], *, model: ModelConfig, recipient: RecipientConfig
) -> SourceHorizon:
    """The horizon of ``source`` for one extraction (see the module's docstring)."""
    cfg = source.config
    max_lag = cfg.max_horizon_lag_seconds if model.max_horizon_lag_seconds is None else model.max_horizon_lag_seconds
    # Switched off, only the clock is asked for (it still bounds future-dated rows): no grant, no catalog view.
    if source.vendor == "postgres":
        sql = POSTGRES_HORIZON_SQL.format(max_lag=int(max_lag)) if cfg.safe_horizon else POSTGRES_CLOCK_SQL
        row = _postgres_row(source, sql) or _spark_row(source, spark(), sql, model, recipient)
        horizon = postgres_horizon(
            {"oldest_us": None, "sees_all": True, "replica": False, "replica_lag_us": None, **row},
            user=cfg.user, max_lag_seconds=max_lag,
        )
    else:  # mysql, mariadb
        try:
            # trx_started has whole seconds, rounded down: one second more keeps a transaction of exactly the lag
            sql = MYSQL_HORIZON_SQL.format(max_lag_rounded=int(max_lag) + 1) if cfg.safe_horizon else MYSQL_CLOCK_SQL
            row = _spark_row(source, spark(), sql, model, recipient)
            horizon = mysql_horizon({"oldest_age_us": None, **row}, max_lag_seconds=max_lag)
        except _MissingGrant:
            row = _spark_row(source, spark(), MYSQL_CLOCK_SQL, model, recipient)
            horizon = SourceHorizon(
                extraction_start=from_micros(int(row["now_us"])), mode=LOOKBACK_ONLY, max_lag_seconds=max_lag,
                note=mysql_grant_note(cfg.user),
            )
    if not cfg.safe_horizon:
        return SourceHorizon(extraction_start=horizon.extraction_start, mode=OFF, max_lag_seconds=max_lag)
    if horizon.note:
        log.warning("source %s: %s", cfg.name, horizon.note)
    return horizon


class _MissingGrant(Exception):
    """The user may not read the open transactions (MySQL's PROCESS privilege)."""


def _postgres_row(source: JdbcConnection, sql: str) -> dict[str, Any] | None:
    """Run ``sql`` through psycopg for a plain ``jdbc:postgresql://host:port/db`` URL (no Spark job); None
    for other URLs or when psycopg cannot connect (Spark JDBC then runs it with its own clear errors)."""
    target = postgres_target(source.config.jdbc_url)
    if target is None:
        return None
    import psycopg
    from psycopg.rows import dict_row

    password = source.config.password()
    try:
        with psycopg.connect(
            **target, user=source.config.user, password=password.get_secret_value() if password else None,
            connect_timeout=10, autocommit=True, application_name="incsync", row_factory=dict_row,
            options="-c default_transaction_read_only=on",
        ) as conn:
            return conn.execute(sql).fetchone()
    except psycopg.Error:
        log.debug("source %s: the horizon query through psycopg failed; asking through Spark", source.config.name)
        return None


def _spark_row(source: JdbcConnection, spark: SparkSession, sql: str, model: ModelConfig, recipient: RecipientConfig) -> dict[str, Any]:
    what = f"model {model.model_name}, recipient {recipient.id}"
    try:
        df = source.load_query(spark, sql, source.jdbc_options(model, recipient), what=what)
        return df.collect()[0].asDict()
    except Exception as exc:
        if "process privilege" in str(exc).lower():
            raise _MissingGrant from None
        from incsync.errors import SourceError

        if isinstance(exc, SourceError):
            raise
        raise source.source_error(exc, what=what) from None

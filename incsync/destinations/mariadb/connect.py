"""Connections to a MariaDB/MySQL destination server (PyMySQL, pure Python): the password from the
environment or the vault, every session in UTC and strict mode, names quoted with backquotes.

A connection is opened for one state read or one publish and closed after it: the server forgets the
session's temporary stage table and its named lock with it, also when the process dies mid-publish.
Secrets never reach a message: PyMySQL's errors name the user and host, never the password.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import pymysql
import pymysql.cursors

from incsync.config.destinations import MariaDBDestinationConfig
from incsync.core.vendor_sql import dialect_for
from incsync.errors import PublishError
from incsync.secrets.stores import open_secret

CONNECT_TIMEOUT_SECONDS = 10
LOCK_WAIT_SECONDS = 600  # for the (database, model) lock another publisher holds
# Strict: a value a column cannot hold fails the statement instead of being cut or rounded.
SQL_MODE = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
# Binary and NO PAD: text compares byte for byte, so `acme`, `ACME` and `acme ` stay three keys.
MARIADB_COLLATION = "utf8mb4_nopad_bin"
MYSQL_COLLATION = "utf8mb4_0900_bin"  # MySQL 8's binary NO PAD collation

_DIALECT = dialect_for("mariadb")
Connection = pymysql.connections.Connection


def quote(name: str) -> str:
    """A backquoted identifier: the name exactly as the database spells it (the sources' own quoting)."""
    return _DIALECT.ident(name)


def table(database: str, name: str) -> str:
    return _DIALECT.relation([database, name])


def password(config: MariaDBDestinationConfig) -> str:
    """The password, opened for the connection about to be made ("" without one)."""
    ref = config.password_ref
    if ref is None:
        return ""
    return open_secret(ref, used_by=f"destinations[{config.name}].{config.password_field}",
                       what="the password").get_secret_value()


@contextlib.contextmanager
def connect(config: MariaDBDestinationConfig, *, local_files: bool = False) -> Iterator[Connection]:
    """A session for the ``with`` block, autocommit off, time zone UTC, strict; closed after it (rolling back
    whatever was not committed)."""
    try:
        conn = pymysql.connect(
            host=config.host, port=config.port, user=config.user, password=password(config), charset="utf8mb4",
            autocommit=False, connect_timeout=CONNECT_TIMEOUT_SECONDS, local_infile=local_files,
            init_command=f"SET time_zone = '+00:00', sql_mode = '{SQL_MODE}'",
        )
    except pymysql.MySQLError as exc:
        raise PublishError(f"destination {config.name}: cannot connect to MariaDB at {config.host}:{config.port} as "
                           f"{config.user}: {' '.join(str(exc).split())}") from None
    try:
        yield conn
    finally:
        with contextlib.suppress(pymysql.MySQLError):
            conn.close()


def rows(conn: Connection, statement: str, params: object = None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(statement, params)
        return list(cur.fetchall())


def run(conn: Connection, statement: str, params: object = None) -> int:
    """Execute one statement; the rows it changed."""
    with conn.cursor() as cur:
        return cur.execute(statement, params)


def collation(conn: Connection) -> str:
    """The binary NO PAD collation of utf8mb4 this server has."""
    version = rows(conn, "SELECT VERSION()")[0][0]
    return MARIADB_COLLATION if "mariadb" in str(version).lower() else MYSQL_COLLATION


def lock(conn: Connection, database: str, model: str, *, where: str) -> None:
    """The (database, model) publish lock, held by the session until it ends: publishers take turns."""
    name = "incsync:" + hashlib.sha1(f"{database}.{model}".encode()).hexdigest()  # lock names stop at 64 characters
    got = rows(conn, "SELECT GET_LOCK(%s, %s)", [name, LOCK_WAIT_SECONDS])[0][0]
    if got != 1:
        raise PublishError(f"{where}: another publish held the lock on it for {LOCK_WAIT_SECONDS} s; nothing was written. "
                           "Retry when it has finished.")

"""The destination conformance suite's one table: each destination kind and what the suite needs to test it.

Every test of ``incsync_tests/destinations/conformance`` runs once per kind listed here. What a kind
supports is read from its own declaration (``Destination.capabilities``); a contract it cannot keep has its
reason there, and the tests that need it are not generated for it (``kinds_with``);
``test_every_kind_declares_its_capabilities`` keeps the table whole. A new destination kind adds one row
here and its spec and environment in ``support.destinations``; the hooks below (a recipient's view, damage
done behind incsync's back) are what the suite asks of a kind beyond the contract.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from incsync.destinations.registry import destination_class
from incsync_tests.support.destinations import PG_DSN_ENV, Target, mariadb_database

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Kind:
    """One destination kind's row of the table. ``None`` means supported; a string is why it is not."""

    name: str
    # (crash point, whether the transfer is committed when the process dies there)
    crash_points: tuple[tuple[str, bool], ...] = (("after_staging", False), ("mid_publish", False), ("after_publish", True))
    text_type: str = "string"  # how the destination names a text column in schema metadata
    wide_int_type: str = "int64"  # the stored type of an integer column widened to 64 bits
    owner_where: str = ""  # how an ownership refusal names the copy ({shared}: the shared folder's path)
    exact_types: dict[str, str] = field(default_factory=dict)  # column of the round trip -> why its form differs
    # How a schema error names recipient acme's table ({folder}: its ./out/acme; {database}: the kind's own)
    table_where: str = ""
    # A full refresh that drops a column empties the table and keeps it (its identity, the column emptied),
    # so a recipient's view or grants on it survive; False: the table is written anew without the column.
    refresh_keeps_table: bool = True
    # DDL commits by itself (MariaDB): a widening is in place before the transfer's own transaction begins.
    ddl_commits_itself: bool = False

    @property
    def upserts(self) -> str | None:
        """None when rows are replaced per key with the last-modified tie-break; else why not."""
        return destination_class(self.name).capabilities.why_not("upserts")

    @property
    def recipient_views(self) -> str | None:
        """None when a view the recipient built on the table survives a full refresh; else why not."""
        return destination_class(self.name).capabilities.why_not("recipient_views")


KINDS_TABLE: tuple[Kind, ...] = (
    Kind("delta", owner_where="Delta table {shared}/orders (destination dest)", table_where="{folder}/orders",
         refresh_keeps_table=False),
    Kind("postgres", text_type="text", wide_int_type="bigint", owner_where="PostgreSQL table acme.orders (destination dest)",
         table_where="acme.orders"),
    Kind(
        "object_storage",
        crash_points=(("after_staging", False), ("mid_publish", False), ("after_manifest", True), ("after_publish", True)),
        owner_where="object-storage prefix {shared}/orders/recipient=acme (destination dest)",
        table_where="{folder} (its earlier manifests)", refresh_keeps_table=False,
    ),
    Kind("duckdb", owner_where="DuckDB table main.orders of {shared}.duckdb (destination dest)", table_where="main.orders"),
    Kind("iceberg", wide_int_type="int64", owner_where="Iceberg table incsync.orders (destination dest)",
         table_where="incsync.orders"),
    Kind("mariadb", owner_where="MariaDB table {database}.orders (destination dest)", table_where="{database}.orders",
         ddl_commits_itself=True),
)
KINDS = tuple(k.name for k in KINDS_TABLE)
BY_NAME = {k.name: k for k in KINDS_TABLE}


def named(template: str, kind: str, folder: Path) -> str:
    """``template`` (an ``owner_where`` or ``table_where``) for the copy in ``folder``: ``{shared}`` and
    ``{folder}`` its path, ``{database}`` the database ``destination_spec`` gives it where the kind has one."""
    database = mariadb_database(f"./out/{folder.name}") if kind == "mariadb" else ""
    return template.format(shared=folder, folder=folder, database=database)


def kinds_with(capability: str) -> list[str]:
    """The kinds that keep ``capability`` (a field of ``Kind`` whose None means supported)."""
    return [k.name for k in KINDS_TABLE if getattr(k, capability) is None]


def stored_type(target: Target, column: str) -> str:
    """The column's type as the destination stores it."""
    stored = target.destination.stored_schema(model=target.model, recipient=target.recipient)
    assert stored is not None, f"{target.kind}: no table yet"
    return stored[column]


def create_view(target: Target) -> None:
    """The recipient's own view on its table, as a recipient would build it."""
    if target.kind == "postgres":
        with target.destination.connect() as conn:
            conn.execute("CREATE VIEW acme.paid_orders AS SELECT id, status FROM acme.orders WHERE status = 'paid'")
        return
    if target.kind == "duckdb":
        with target.destination.connect() as con:
            con.execute("CREATE VIEW paid_orders AS SELECT id, status FROM orders WHERE status = 'paid'")
        return
    if target.kind == "mariadb":
        _mariadb(target, "CREATE VIEW {db}.paid_orders AS SELECT id, status FROM {db}.orders WHERE status = 'paid'")
        return
    raise AssertionError(f"{target.kind}: {BY_NAME[target.kind].recipient_views}")


def _mariadb(target: Target, statement: str) -> list[tuple]:
    from incsync.destinations.mariadb.connect import connect, rows

    with connect(target.destination.config) as conn:  # type: ignore[attr-defined]
        return rows(conn, statement.format(db=f"`{target.destination.database}`"))  # type: ignore[attr-defined]


def view_rows(target: Target) -> list[tuple]:
    if target.kind == "postgres":
        with target.destination.connect() as conn:
            return conn.execute("SELECT id, status FROM acme.paid_orders ORDER BY id").fetchall()
    if target.kind == "duckdb":
        with target.destination.connect() as con:
            return con.execute("SELECT id, status FROM paid_orders ORDER BY id").fetchall()
    if target.kind == "mariadb":
        return _mariadb(target, "SELECT id, status FROM {db}.paid_orders ORDER BY id")
    raise AssertionError(f"{target.kind}: {BY_NAME[target.kind].recipient_views}")


def damage(target: Target, root: Path, change: Callable[[Rows], Rows]) -> None:
    """Rewrite the copy's rows with ``change`` behind incsync's back (no transfer record, no manifest)."""
    from incsync_tests.support.integrity import damage_destination

    damage_destination(target.kind, root, change, dsn=os.environ.get(PG_DSN_ENV))

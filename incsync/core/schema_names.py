"""Which schema names a schema-tenanted model can read: any name the source database can hold.

A recipient's schema (``id_in_provider_system`` under ``tenancy: schema``) is used exactly as written
and always quoted (``"globex-eu"``, `` `Acme Corp` ``), so dashes, spaces, dots, quotes and upper case
are fine. Refused are only names the database cannot hold, or holds as another name:

- PostgreSQL: empty, a NUL character, or longer than 63 bytes (PostgreSQL cuts a longer name to 63
  bytes, so two such schemas would be one);
- MySQL/MariaDB: empty, a NUL character, longer than 64 characters, a trailing space or a character
  beyond the Basic Multilingual Plane (an emoji) — the server refuses these as database names; and,
  for a ``source_query``, a ``?`` (the recipient's database becomes the JDBC URL's database, which the
  driver ends at the first ``?``).
"""

from __future__ import annotations

POSTGRES_MAX_BYTES = 63
MYSQL_MAX_CHARS = 64


def shown(name: str) -> str:
    """``name`` quoted for a message, a long one cut (a message never repeats a long value in full)."""
    return f'"{name[:40]}…"' if len(name) > 48 else f'"{name}"'


def schema_name_problem(vendor: str, name: str, *, source_query: bool = False) -> str | None:
    """Why ``vendor`` cannot hold (or incsync cannot reach) schema ``name``; None when it can.

    ``source_query``: the model reads a ``source_query``, whose unqualified tables must resolve in the
    recipient's schema."""
    if not name:
        return "is empty; write the schema's name as the database spells it"
    if "\x00" in name:
        return "holds a NUL character, which no database name can; remove it"
    if vendor == "postgres":
        size = len(name.encode("utf-8"))
        if size > POSTGRES_MAX_BYTES:
            return (f"is {size} bytes long; PostgreSQL keeps the first {POSTGRES_MAX_BYTES} bytes of a name, "
                    "so use a shorter schema name")
        return None
    if vendor in ("mysql", "mariadb"):
        if len(name) > MYSQL_MAX_CHARS:
            return f"is {len(name)} characters long; a MySQL/MariaDB database name has at most {MYSQL_MAX_CHARS}"
        if name.endswith(" "):
            return "ends with a space, which a MySQL/MariaDB database name cannot; remove it"
        if any(ord(ch) > 0xFFFF for ch in name):
            return "holds a character beyond the Basic Multilingual Plane (an emoji?), which a MySQL/MariaDB name cannot"
        if source_query and "?" in name:
            return ("holds a ?, and a source_query reads the recipient's database as the JDBC URL's, which the driver "
                    "ends at the first ?; rename the database or read it with source_table")
    return None

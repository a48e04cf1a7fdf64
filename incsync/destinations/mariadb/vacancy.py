"""Whether a database can take a recipient's copies before it connects (onboarding's test): it is missing (the
first transfer creates it), empty, or holds only this recipient's copies."""

from __future__ import annotations

from pymysql.connections import Connection

from incsync.destinations.mariadb.connect import rows, table
from incsync.destinations.mariadb.log import TRANSFERS


def vacancy_problem(conn: Connection, database: str, recipient: str) -> str | None:
    """What keeps ``database`` from taking ``recipient``'s copies, with the fix; None when nothing does."""
    tables = [r for (r,) in rows(conn, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                                       "ORDER BY 1", [database])]
    if TRANSFERS in tables:
        others = rows(conn, f"SELECT COUNT(DISTINCT recipient_id) FROM {table(database, TRANSFERS)} "
                            "WHERE recipient_id <> %s", [recipient])
        if others and others[0][0]:
            return f"database {database} holds copies incsync wrote for another recipient; choose a database of your own"
        return None
    if tables:
        shown = ", ".join(tables[:3]) + (" ..." if len(tables) > 3 else "")
        return (f"database {database} already holds tables incsync did not write ({shown}); choose a new or empty "
                "database (incsync creates it)")
    return None

"""Whether a schema can take a recipient's copies before it connects (onboarding's test): the user may create it
or its tables, and it is empty or holds only this recipient's copies."""

from __future__ import annotations

import psycopg

from incsync.destinations.postgres.log import TRANSFERS_TABLE


def vacancy_problem(conn: psycopg.Connection, schema: str, recipient: str) -> str | None:
    """What keeps ``schema`` from taking ``recipient``'s copies, with the fix; None when nothing does."""
    user, database = conn.execute("SELECT current_user, current_database()").fetchone() or ("?", "?")
    found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
    if found is None:
        (may,) = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone() or (False,)
        if not may:
            return (f'user {user} may not create schema "{schema}" in database {database}: run GRANT CREATE ON DATABASE '
                    f'"{database}" TO "{user}", or create the schema and GRANT USAGE, CREATE ON it to {user}')
        return None
    usage, create = conn.execute("SELECT has_schema_privilege(%s, 'USAGE'), has_schema_privilege(%s, 'CREATE')",
                                 [schema, schema]).fetchone() or (False, False)
    if not (usage and create):
        return f'user {user} lacks USAGE or CREATE on schema "{schema}": run GRANT USAGE, CREATE ON SCHEMA "{schema}" TO "{user}"'
    tables = [r for (r,) in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
        "AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1", [schema]).fetchall()]
    if TRANSFERS_TABLE in tables:
        others = conn.execute(
            psycopg.sql.SQL("SELECT count(DISTINCT recipient_id) FROM {} WHERE recipient_id <> %s").format(
                psycopg.sql.Identifier(schema, TRANSFERS_TABLE)), [recipient]).fetchone()
        if others and others[0]:
            return f'schema "{schema}" holds copies incsync wrote for another recipient; choose a schema of your own'
        return None
    if tables:
        shown = ", ".join(tables[:3]) + (" ..." if len(tables) > 3 else "")
        return (f'schema "{schema}" already holds tables incsync did not write ({shown}); choose a new or empty schema '
                "(incsync creates it)")
    return None

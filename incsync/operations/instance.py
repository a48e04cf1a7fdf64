"""The Dagster instance incsync runs in, and checks of a dagster.yaml's PostgreSQL storage: the URL form
that works with this stack.

dagster-postgres issues ``NOTIFY run_events, %(id)s``, which only the psycopg2 driver expands
client-side. SQLAlchemy 2.1 maps a plain ``postgresql://`` URL to psycopg 3, which sends a server-side
``$1`` placeholder that NOTIFY refuses (``syntax error at or near "$1"``) at the first event of the
first run. ``postgresql+psycopg2://`` works (psycopg2-binary comes with the ``postgres`` extra).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import dagster as dg

WORKING_SCHEME = "postgresql+psycopg2"
STORAGE_SECTIONS = ("storage", "run_storage", "event_log_storage", "schedule_storage")
_FIX = f"write the URL as {WORKING_SCHEME}://user:password@host:5432/db (docs/deploy.md)"


def postgres_url_problem(url: str, where: str) -> str | None:
    """A problem line when ``url`` selects a driver dagster-postgres cannot use; the URL is never repeated
    (it may hold a password), only its scheme."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == WORKING_SCHEME:
        return None
    return f'{where}: the scheme "{scheme or "(none)"}" fails with dagster-postgres on SQLAlchemy 2.1; {_FIX}'


def _postgres_settings(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, Mapping):
        if "postgres_url" in node or "postgres_db" in node:
            yield path, node  # type: ignore[misc]  # a generator of the YAML tree's nodes
        for key, value in node.items():
            yield from _postgres_settings(value, f"{path}.{key}")


def storage_problems(doc: Mapping[str, Any]) -> list[str]:
    """One line per PostgreSQL storage setting of a dagster.yaml that would fail at run time.

    A ``postgres_url: {env: NAME}`` is checked when the variable is set (by its scheme only); a
    ``postgres_db`` without ``scheme`` gets the working one from ``with_working_scheme``.
    """
    problems: list[str] = []
    found = False
    for section in STORAGE_SECTIONS:
        for where, settings in _postgres_settings(doc.get(section), section):
            found = True
            url = settings.get("postgres_url")
            if isinstance(url, str):
                problem = postgres_url_problem(url, f"{where}.postgres_url")
            elif isinstance(url, Mapping) and "env" in url:
                value = os.environ.get(str(url["env"]))
                problem = value and postgres_url_problem(value, f"{where}.postgres_url (${url['env']})")
            else:
                db = settings.get("postgres_db") or {}
                scheme = db.get("scheme", WORKING_SCHEME) if isinstance(db, Mapping) else WORKING_SCHEME
                problem = None if scheme == WORKING_SCHEME else (
                    f'{where}.postgres_db.scheme: "{scheme}" fails with dagster-postgres on SQLAlchemy 2.1; '
                    f"use {WORKING_SCHEME}")
            if problem:
                problems.append(problem)
    if found and importlib.util.find_spec("dagster_postgres") is None:
        problems.append("PostgreSQL storage needs dagster-postgres: pip install 'incsync[postgres]'")
    return problems


def with_working_scheme(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``scheme: postgresql+psycopg2`` in every ``postgres_db`` that names no scheme."""
    for section in STORAGE_SECTIONS:
        for _, settings in _postgres_settings(doc.get(section), section):
            db = settings.get("postgres_db")
            if isinstance(db, dict):
                db.setdefault("scheme", WORKING_SCHEME)
    return doc


_STORAGE_COMMENT = "# Dagster's SQLite event log storing each batch of asset events at once (incsync/operations/dagster_compat/sqlite.py)\n"
_FIRST_DAGSTER_YAML = "telemetry:\n  enabled: false\n"  # what incsync wrote before the batching event log
# The event log's old module paths: before incsync had packages, and in ``orchestration``.
_MOVED_STORAGE_MODULES = ("module: incsync.dagster_compat\n", "module: incsync.orchestration.dagster_compat\n")


def dagster_instance(config_file: Path) -> dg.DagsterInstance:
    """The instance in $DAGSTER_HOME, else ``.dagster`` beside the config file (created on first use)."""
    import dagster as dg
    import yaml

    from incsync.errors import ConfigError
    from incsync.operations.dagster_compat import event_log_storage_config
    from incsync.paths import dagster_home

    home = dagster_home(config_file)
    os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    yaml_file = home / "dagster.yaml"
    if not yaml_file.exists() or yaml_file.read_text() == _FIRST_DAGSTER_YAML:
        storage = yaml.safe_dump({"event_log_storage": event_log_storage_config(home)}, sort_keys=False)
        yaml_file.write_text(_FIRST_DAGSTER_YAML + _STORAGE_COMMENT + storage)
    else:  # one written while the event log's class lived elsewhere now names where it is
        text = yaml_file.read_text()
        for old in _MOVED_STORAGE_MODULES:
            if old in text:
                yaml_file.write_text(text.replace(old, f"module: {event_log_storage_config(home)['module']}\n"))
    problems = storage_problems(yaml.safe_load(yaml_file.read_text()) or {})
    if problems:  # say so now, not as a NOTIFY syntax error in the middle of the first run
        raise ConfigError(str(yaml_file), problems)
    return dg.DagsterInstance.get()

"""What `incsync validate` checks beyond the file model, without Spark.

* Without ``--connect``: lake tables' columns from their Parquet footers (pyarrow) or CSV header
  lines, so a misspelt key or column is caught before any transfer; environment variables named by
  the file that are not set (a warning: the machine that runs transfers may set them).
* With ``--connect``: every model's columns, key, last-modified and tenant columns against each
  source, all sources in parallel — PostgreSQL through psycopg (one ``LIMIT 0`` query a model), lake
  tables through their footers. Other databases are checked through Spark JDBC by ``checks``.

Problems are ``(path, text)`` pairs; ``path`` (``models[0].primary_key``) finds the file's line.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from incsync.config.destinations import DESTINATION_MODELS
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.products import subscribers
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig

MAX_PARALLEL = 16


def unset_variables(config: IncsyncConfig) -> list[str]:
    """One warning per ``password_env`` / ``dsn_env`` (and the vault's key variable) the environment does not set."""
    warnings: list[str] = []
    for i, source in enumerate(config.sources):
        if isinstance(source, JdbcSourceConfig) and source.password_env and source.password_env not in os.environ:
            warnings.append(f"sources[{i}].password_env: variable {source.password_env} is not set here; "
                            f"export {source.password_env}=... wherever transfers run")
    for i, destination in enumerate(config.destinations):
        for field, variable, example in destination.required_variables():
            if variable not in os.environ:
                warnings.append(f"destinations[{i}].{field}: variable {variable} is not set here; "
                                f"export {variable}={example} wherever transfers run")
    vault = config.vault
    if vault is not None and vault.key_file is None and vault.key_env not in os.environ:
        warnings.append(f"vault.key_env: variable {vault.key_env} is not set here; export the vault's keys in it "
                        "wherever transfers run (docs/secrets.md)")
    return warnings


def _named_columns(model: ModelConfig) -> list[tuple[str, str]]:
    """(field, column) for every column the model names."""
    named = [("primary_key", c) for c in model.primary_key]
    named.append(("last_modified_column", model.last_modified_column))
    if model.organization_column:
        named.append(("organization_column", model.organization_column))
    named += [("columns", c) for c in model.columns or []]
    named += [("column_types", c) for c in model.column_types or {}]
    named += [("cluster_by", c) for c in model.cluster_by or []]
    return named


def ignored_cluster_by(config: IncsyncConfig) -> list[str]:
    """A model's ``cluster_by`` orders and prunes Delta files only: say which recipients' copies ignore it."""
    warnings = []
    clustering = " and ".join(kind for kind, cls in DESTINATION_MODELS.items() if cls.clusters_files)
    destinations = {d.name: d for d in config.destinations}
    for i, model in enumerate(config.models):
        if not model.cluster_by:
            continue
        others = sorted({(r.id, destinations[r.destination].kind) for r in subscribers(config, model.model_name)
                         if r.destination in destinations and not destinations[r.destination].clusters_files})
        if others:
            names = ", ".join(f"{rid} ({kind})" for rid, kind in others[:5])
            names += f" and {len(others) - 5} more" if len(others) > 5 else ""
            warnings.append(f"models[{i}].cluster_by: only {clustering} destinations cluster files; it is ignored for {names}")
    return warnings


def column_problems(where: str, model: ModelConfig, have: list[str], what: str) -> list[str]:
    """Each column the model names that ``have`` (the source's columns) lacks."""
    import difflib

    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for field, column in _named_columns(model):
        if column in have or (field, column) in seen:
            continue
        seen.add((field, column))
        close = difflib.get_close_matches(column, have, n=1)
        fix = f'did you mean "{close[0]}"?' if close else f"it has {', '.join(have)}"
        problems.append(f'{where}.{field}: column "{column}" is not in {what}; {fix}')
    return problems


def lake_folder(source: LakeSourceConfig, model: ModelConfig, recipient: RecipientConfig | None) -> Path | None:
    if source.format not in ("parquet", "csv") or not source.path or "://" in source.path or not model.source_table:
        return None
    from incsync.core.sql_text import split_qualified

    parts = split_qualified(model.source_table) or [model.source_table]
    if model.tenancy == "schema":
        if recipient is None:
            return None
        parts = [recipient.id_in_provider_system, *parts]
    return Path(source.path).joinpath(*parts)


def lake_columns(folder: Path, file_format: str) -> list[str] | None:
    """The table's columns from one Parquet footer or CSV header line; None when it has no file yet."""
    files = sorted(p for p in folder.rglob(f"*.{file_format}") if not p.name.startswith((".", "_")))
    if not files:
        return None
    if file_format == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(files[0]).names)
    import csv

    with open(files[0], newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle), [])


def lake_schema_problems(config: IncsyncConfig) -> tuple[list[str], list[str]]:
    """(problems, warnings) of every lake model's columns against its table's files."""
    problems: list[str] = []
    warnings: list[str] = []
    sources = {s.name: s for s in config.sources}
    for i, model in enumerate(config.models):
        source = sources.get(model.source)
        if not isinstance(source, LakeSourceConfig):
            continue
        folder = lake_folder(source, model, next(iter(subscribers(config, model.model_name)), None))
        if folder is None:
            continue
        try:
            have = lake_columns(folder, source.format) if folder.is_dir() else None
        except Exception as exc:  # noqa: BLE001 - an unreadable file: said, not raised
            warnings.append(f"models[{i}].source_table: could not read the columns of {folder} ({exc})")
            continue
        if have is None:
            warnings.append(f"models[{i}].source_table: lake table {folder} has no {source.format} file yet; "
                            "its columns are checked once it has one")
            continue
        problems += column_problems(f"models[{i}]", model, have, f"lake table {folder}")
    return problems, warnings


def _postgres_columns(source: JdbcSourceConfig, model: ModelConfig, recipient: RecipientConfig) -> list[str] | None:
    """The relation's columns through psycopg (``LIMIT 0``), or None when the URL needs the JDBC driver."""
    from incsync.core.vendor_sql import postgres_target
    from incsync.sources.jdbc.source import JdbcSource

    target = postgres_target(source.jdbc_url)
    if target is None:
        return None
    client = JdbcSource(source)
    with client.pg_connect(target, client.schema_of(model, recipient)) as conn:
        if model.source_table is not None:
            relation = client.dialect.relation(client.table_parts(model, recipient))
        else:
            from incsync.core.sql_text import pasted_query

            relation = f"({pasted_query(model.source_query or '', vendor='postgres')}\n) q"
        cursor = conn.execute(f"SELECT * FROM {relation} LIMIT 0")
        columns = [d.name for d in cursor.description]
        if model.source_table is not None:  # read-only credentials suffice: say so when these could write
            writable = conn.execute("SELECT has_table_privilege(%s, 'INSERT,UPDATE,DELETE,TRUNCATE')",
                                    [client.dialect.relation(client.table_parts(model, recipient))]).fetchone()[0]
            if writable:
                import logging

                logging.getLogger("incsync.sources.jdbc.source").warning(
                    "source %s: user %s can write to %s; incsync only reads, so grant it SELECT only",
                    source.name, source.user, model.source_table,
                )
    try:  # the safe horizon's grant: warns (as a transfer would) when the user cannot see other sessions
        client.horizon(_no_spark, model=model, recipient=recipient)
    except Exception:  # noqa: BLE001 - the horizon is the transfer's business; columns were the question
        pass
    return columns


def _no_spark():  # noqa: ANN202 - validate never starts Spark for a PostgreSQL source
    raise RuntimeError("no Spark in validate")


def connect_schema_problems(config: IncsyncConfig) -> tuple[list[str], set[str]]:
    """(problems, names of the sources checked here) — every model of every lake and PostgreSQL source
    against the source itself, all at once. Sources not checked here are left to Spark JDBC."""
    from incsync.errors import IncsyncError

    sources = {s.name: s for s in config.sources}
    enabled = [r for r in config.recipients if r.enabled]
    anyone = enabled[:1] or [RecipientConfig(id="check", id_in_provider_system="", destination="-")]
    jobs = []
    for i, model in enumerate(config.models):
        source = sources.get(model.source)
        if isinstance(source, JdbcSourceConfig) and source.vendor == "postgres":
            for recipient in subscribers(config, model.model_name, enabled) if model.tenancy == "schema" else anyone:
                jobs.append((i, model, source, recipient))

    def check(job: tuple[int, ModelConfig, JdbcSourceConfig, RecipientConfig]) -> tuple[str, list[str] | None]:
        i, model, source, recipient = job
        try:
            have = _postgres_columns(source, model, recipient)
        except IncsyncError as exc:
            return source.name, [f"sources[{source.name}] (model {model.model_name}, recipient {recipient.id}): {exc}"]
        except Exception as exc:  # noqa: BLE001 - a connection or SQL error, named with its source
            from incsync.errors import root_cause, sanitize

            secrets = [os.environ[source.password_env]] if source.password_env and os.environ.get(source.password_env) else []
            text = sanitize(" ".join(root_cause(exc).split()), secrets)
            return source.name, [f"models[{i}].source_table: source {source.name} (recipient {recipient.id}): {text}; "
                                 "check the table name, `jdbc_url`, `user` and `password_env`"]
        if have is None:
            return source.name, None
        where = f"table {model.source_table}" if model.source_table else "the source query"
        return source.name, column_problems(f"models[{i}]", model, have, f"{where} of source {source.name}")

    problems, lake_warnings = lake_schema_problems(config)
    problems += lake_warnings  # with --connect a lake table without files is a problem
    checked = {s.name for s in config.sources if isinstance(s, LakeSourceConfig)}
    unchecked: set[str] = set()
    if jobs:
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(jobs))) as pool:
            for name, found in pool.map(check, jobs):
                if found is None:
                    unchecked.add(name)
                else:
                    problems += found
        checked |= {job[2].name for job in jobs} - unchecked
    return problems, checked

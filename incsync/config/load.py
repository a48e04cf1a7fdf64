"""Loading the configuration: the file named by the argument, ``$INCSYNC_CONFIG`` or ``incsync.yaml``;
YAML and pydantic errors as one message per problem at its line; the ``recipients_from`` table's rows;
relative paths resolved against the file's folder."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError as PydanticValidationError

from incsync.config.checks import cross_check_problems, length_problems
from incsync.config.destinations_table import read_destination_rows
from incsync.config.messages import pydantic_problems
from incsync.config.model import IncsyncConfig
from incsync.config.recipients_table import WHERE, read_recipient_rows, recipients_source, tables_digest
from incsync.config.rows import TableRows, merge_rows
from incsync.config.secrets import bind_secrets
from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig
from incsync.config.yaml_load import load_yaml
from incsync.errors import ConfigError
from incsync.paths import CONFIG_ENV_VAR, config_path


def parse_config(data: Any, *, path: str = "<memory>", base: Path | None = None) -> IncsyncConfig:
    """Validate a loaded YAML document; raise ConfigError with every problem at once.

    ``base`` is the folder relative paths are taken against (the file's; default the working directory).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, ["(top level): expected a mapping with sources, destinations, models, recipients"])
    try:
        cfg = IncsyncConfig.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(path, pydantic_problems(exc)) from None
    problems = cross_check_problems(cfg) + length_problems(cfg)
    if not problems:
        from incsync.config.locations import shared_location_problems

        problems = shared_location_problems(cfg, base or Path.cwd())
    if problems:
        raise ConfigError(path, problems)
    return bind_secrets(cfg, base or Path.cwd())


def load_config(path: str | os.PathLike[str] | None = None) -> IncsyncConfig:
    """Read and validate the file named by ``path``, ``$INCSYNC_CONFIG`` or ``incsync.yaml``.

    Relative lake and destination paths are resolved against the file's folder.
    """
    file = config_path(path)
    if not file.exists():
        raise ConfigError(str(file), [f"file not found; create it or point {CONFIG_ENV_VAR} at it"])
    text = file.read_text()
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(str(file), exc) from None
    try:
        return _load_remembered(file, text, data)
    except ConfigError as exc:
        if exc.path != str(file) or any(exc.lines):
            raise
        from incsync.config.lines import problem_lines

        raise ConfigError(exc.path, exc.problems, problem_lines(text, exc.problems)) from None


def _yaml_error(path: str, exc: yaml.YAMLError) -> ConfigError:
    """A YAML syntax error at its line in the file (PyYAML's own text cites "<unicode string>")."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = " ".join(filter(None, [getattr(exc, "context", None), getattr(exc, "problem", None)])) or str(exc)
    problem = (f"not valid YAML: {what}; check the indentation and quoting at column {mark.column + 1}" if mark
               else f"not valid YAML: {what}")
    return ConfigError(path, [problem], [mark.line + 1 if mark else None])


def _table_rows(data: Any, path: str) -> TableRows | None:
    """What the ``recipients_from`` tables hold (None when the file names none)."""
    source = recipients_source(data, path=path) if isinstance(data, dict) else None
    if source is None:
        return None
    spec = data["recipients_from"]
    config = JdbcSourceConfig.model_validate(source)
    rows = TableRows(str(spec["table"]), read_recipient_rows(config, str(spec["table"]), path=path))
    if spec.get("destinations_table"):
        rows.destinations_table = str(spec["destinations_table"])
        rows.destinations = read_destination_rows(config, rows.destinations_table, path=path)
    return rows


# The last configuration loaded per file with `recipients_from` tables, keyed by the file's text, the environment
# and a digest of the tables: a sensor tick that finds neither changed reuses it instead of reading and validating 10,000 rows.
_REMEMBERED: dict[str, tuple[tuple[str, str], IncsyncConfig]] = {}
_REMEMBERED_LOCK = threading.Lock()


def _load_remembered(file: Path, text: str, data: Any) -> IncsyncConfig:
    digest = _tables_digest(data, str(file))
    if digest is None:
        return _load_parsed(file, data)
    # The environment too: where a destination's DSN variable points decides the location checks.
    seen = hashlib.sha256(text.encode())
    seen.update(repr(sorted(os.environ.items())).encode())
    key, name = (seen.hexdigest(), digest), str(file.resolve())
    with _REMEMBERED_LOCK:
        known = _REMEMBERED.get(name)
    if known is not None and known[0] == key:
        return known[1]
    cfg = _load_parsed(file, data)
    with _REMEMBERED_LOCK:
        _REMEMBERED[name] = (key, cfg)
    return cfg


def _tables_digest(data: Any, path: str) -> str | None:
    """What the ``recipients_from`` tables hold, as a digest the database computes (None without tables)."""
    source = recipients_source(data, path=path) if isinstance(data, dict) else None
    if source is None:
        return None
    spec = data["recipients_from"]
    tables = [(str(spec["table"]), f"{WHERE}.table")]
    if spec.get("destinations_table"):
        tables.append((str(spec["destinations_table"]), f"{WHERE}.destinations_table"))
    return tables_digest(JdbcSourceConfig.model_validate(source), tables, path=path)


def _load_parsed(file: Path, data: Any) -> IncsyncConfig:
    rows = _table_rows(data, str(file))
    base = file.resolve().parent
    if rows is None:
        return _resolve_paths(parse_config(data, path=str(file), base=base), base)
    try:
        cfg = IncsyncConfig.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(str(file), pydantic_problems(exc)) from None
    cfg = merge_rows(cfg, rows, path=str(file), base=base)
    return _resolve_paths(bind_secrets(cfg, base), base)


def _resolve_paths(cfg: IncsyncConfig, base: Path) -> IncsyncConfig:
    def resolve(p: str | None) -> str | None:
        if p is None or "://" in p or os.path.isabs(p):
            return p
        return os.path.normpath(os.path.join(base, p))  # no per-path stat: cheap for 10,000 destinations

    sources = [s.model_copy(update={"path": resolve(s.path)}) if isinstance(s, LakeSourceConfig) else s for s in cfg.sources]
    destinations = [
        d.model_copy(update={"path": resolve(d.path)}) if hasattr(d, "path") else d for d in cfg.destinations
    ]
    return cfg.model_copy(
        update={"sources": sources, "destinations": destinations, "staging_dir": resolve(cfg.staging_dir)}
    )

"""Where incsync looks for its files. Standard library only: the thin `incsync transfer --worker`
client imports this, not pydantic or Dagster."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CONFIG_FILE = "incsync.yaml"
CONFIG_ENV_VAR = "INCSYNC_CONFIG"


def config_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$INCSYNC_CONFIG``, else ``incsync.yaml`` in the working directory."""
    return Path(path or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_FILE)


def dagster_home(config_file: Path) -> Path:
    """The Dagster instance's folder: ``$DAGSTER_HOME``, else ``.dagster`` beside the config file."""
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) if home else config_file.resolve().parent / ".dagster"

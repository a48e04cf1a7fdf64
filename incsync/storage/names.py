"""Storage URLs as a config names them: schemes, local paths and the options' secret rule.

Kept apart from ``incsync.storage.files`` (pyarrow.fs) so that loading and checking a config, which every
code server and run worker does, does not import pyarrow.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

REMOTE_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "abfss": "abfss", "abfs": "abfss", "az": "abfss"}
ENV_SUFFIX = "_env"
_SECRET_RE = re.compile(r"secret|password|token|(^|_)key$|sas")


def is_url(path: str | os.PathLike[str] | None) -> bool:
    """True for an object-store URL (``s3://``, ``gs://``, ...); local paths and ``file://`` are False."""
    return path is not None and "://" in str(path) and not str(path).startswith("file:")


def scheme_of(url: str) -> str:
    return REMOTE_SCHEMES.get(urlsplit(url).scheme.lower(), urlsplit(url).scheme.lower())


def local_path(path: str | os.PathLike[str]) -> str:
    """A local path from a path or a ``file://`` URL."""
    text = str(path)
    if text.startswith("file:"):
        parts = urlsplit(text)
        return unquote(parts.path) if parts.netloc in ("", "localhost") else f"//{parts.netloc}{unquote(parts.path)}"
    return text


def url_problem(path: str | None) -> str | None:
    """Why ``path`` is no storage URL incsync serves; None for local paths and supported schemes."""
    if not is_url(path) or scheme_of(str(path)) in REMOTE_SCHEMES.values():
        return None
    return f"scheme {urlsplit(str(path)).scheme}:// is not supported; use a local path, file://, s3://, gs:// or abfss://"


def option_problems(options: Mapping[str, str], where: str) -> list[str]:
    """Why ``options`` may not stand in the file: a literal secret (it must be ``<option>_env``)."""
    problems = []
    for key in options:
        name = key.lower()
        if name.endswith(ENV_SUFFIX):
            if not str(options[key]).strip():
                problems.append(f"{where}.{key}: name the environment variable that holds {key[: -len(ENV_SUFFIX)]}")
            continue
        if _SECRET_RE.search(name):
            problems.append(
                f"{where}.{key}: a secret must not be written in the file; write `{key}{ENV_SUFFIX}: VARIABLE` "
                "and export VARIABLE"
            )
    return problems

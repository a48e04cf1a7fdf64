"""Filesystems for every URL incsync reads or writes: local folders, ``file://`` and object stores
(``s3://`` / ``s3a://``, ``gs://``, ``abfss://``), built on ``pyarrow.fs`` (see ``incsync.storage.files``).

``storage_options`` use delta-rs's (object_store's) names, so one mapping serves delta-rs unchanged and
is translated here for pyarrow. A secret is never in the file: ``<option>_env: VARIABLE`` names the
environment variable holding it, as ``password_env`` does for databases. Without options, both read the
standard variables (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs

from incsync.errors import ConfigError
from incsync.storage.names import ENV_SUFFIX, is_url, local_path, scheme_of, url_problem


def resolve_options(options: Mapping[str, str] | None, where: str) -> dict[str, str]:
    """The options with every ``<option>_env`` replaced by ``<option>`` and its variable's value."""
    resolved: dict[str, str] = {}
    missing = []
    for key, value in (options or {}).items():
        if key.lower().endswith(ENV_SUFFIX):
            secret = os.environ.get(str(value))
            if secret is None:
                missing.append(f"{where}.{key}: variable {value} is not set; export it before running")
                continue
            resolved[key[: -len(ENV_SUFFIX)].lower()] = secret
        else:
            resolved[key.lower()] = str(value)
    if missing:
        raise ConfigError("environment", missing)
    return resolved


# delta-rs's option names (docs/storage.md) -> pyiceberg's FileIO properties.
_PYICEBERG_S3 = {
    "aws_access_key_id": "s3.access-key-id", "access_key_id": "s3.access-key-id",
    "aws_secret_access_key": "s3.secret-access-key", "secret_access_key": "s3.secret-access-key",
    "aws_session_token": "s3.session-token", "session_token": "s3.session-token",
    "aws_region": "s3.region", "region": "s3.region", "aws_default_region": "s3.region",
    "aws_endpoint_url": "s3.endpoint", "aws_endpoint": "s3.endpoint", "endpoint_url": "s3.endpoint", "endpoint": "s3.endpoint",
}


def pyiceberg_properties(options: Mapping[str, str] | None) -> dict[str, str]:
    """Resolved ``storage_options`` (delta-rs's names) as pyiceberg's FileIO properties (``s3.*``)."""
    options = {k.lower(): v for k, v in (options or {}).items()}
    props = {_PYICEBERG_S3[k]: v for k, v in options.items() if k in _PYICEBERG_S3}
    if options.get("aws_allow_http", "").lower() == "true" or props.get("s3.endpoint", "").startswith("http://"):
        props.setdefault("s3.force-virtual-addressing", "false")
    return props


def _truthy(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def _s3(options: Mapping[str, str]) -> pafs.FileSystem:
    kwargs: dict[str, object] = {}
    pick = {"access_key": ("aws_access_key_id", "access_key_id"),
            "secret_key": ("aws_secret_access_key", "secret_access_key"),
            "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
            "region": ("aws_region", "region", "aws_default_region")}
    for arg, names in pick.items():
        for name in names:
            if options.get(name):
                kwargs[arg] = options[name]
                break
    endpoint = next((options[n] for n in ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint") if options.get(n)), None)
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        kwargs["scheme"] = parts.scheme
    if _truthy(options.get("aws_virtual_hosted_style_request")):
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def _gcs(options: Mapping[str, str]) -> pafs.FileSystem:
    kwargs: dict[str, object] = {}
    if options.get("google_endpoint"):
        parts = urlsplit(options["google_endpoint"])
        kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme)
    if _truthy(options.get("google_skip_signature")):
        kwargs["anonymous"] = True
    return pafs.GcsFileSystem(**kwargs)


def _azure(account: str, options: Mapping[str, str]) -> pafs.FileSystem:
    kwargs: dict[str, object] = {"account_name": options.get("azure_storage_account_name") or account}
    for arg, name in (("account_key", "azure_storage_account_key"), ("client_id", "azure_client_id"),
                      ("client_secret", "azure_client_secret"), ("tenant_id", "azure_tenant_id"),
                      ("sas_token", "azure_storage_sas_key")):
        if options.get(name):
            kwargs[arg] = options[name]
    return pafs.AzureFileSystem(**kwargs)


def filesystem(url: str, options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem serving ``url`` and the path on it (``bucket/prefix`` on object stores)."""
    options = {k.lower(): v for k, v in (options or {}).items()}
    if not is_url(url):
        return pafs.LocalFileSystem(), os.path.abspath(local_path(url))
    parts = urlsplit(url)
    scheme = scheme_of(url)
    key = unquote(parts.path).strip("/")
    if scheme == "s3":
        return _s3(options), f"{parts.netloc}/{key}".rstrip("/")
    if scheme == "gs":
        return _gcs(options), f"{parts.netloc}/{key}".rstrip("/")
    if scheme == "abfss":
        container, _, host = parts.netloc.partition("@")
        return _azure(host.split(".")[0], options), f"{container}/{key}".rstrip("/")
    raise ConfigError("storage", [f"{url}: {url_problem(url)}"])

"""Putting the sharing server together from a configuration file, and running it: in the foreground
(`incsync serve`) or on a thread (tests, the demo). Also the profile file a recipient connects with."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import uvicorn
from starlette.routing import BaseRoute

from incsync.config.load import load_config
from incsync.config.model import IncsyncConfig
from incsync.config.sharing import SharingConfig
from incsync.sharing.app import build_app
from incsync.sharing.audit import LoggedReads, ReadAudit, WarehouseReads
from incsync.sharing.catalog import LiveCatalog
from incsync.sharing.errors import SharingError
from incsync.sharing.iceberg.answers import IcebergService
from incsync.sharing.iceberg.api import PREFIX as ICEBERG_PREFIX
from incsync.sharing.iceberg.api import STORAGE
from incsync.sharing.iceberg.credentials import CredentialVendor
from incsync.sharing.protocol import PREFIX
from incsync.sharing.service import SharingService
from incsync.sharing.signing import UrlSigner
from incsync.sharing.tokens import Minted, TokenStore
from incsync.staging.folders import default_staging_dir

log = logging.getLogger(__name__)

DEFAULT_STORE = ".incsync-sharing.sqlite"
ICEBERG_PROFILE_KEY = "icebergCatalog"  # the profile's entry with the Iceberg REST catalog's settings
MIN_KEY = 32


def token_store(config_file: Path, sharing: SharingConfig) -> TokenStore:
    """The token store the ``sharing:`` section names, relative to the file's folder (default beside it)."""
    base = config_file.resolve().parent
    return TokenStore(base / (sharing.token_store or DEFAULT_STORE))


def listen_address(sharing: SharingConfig) -> tuple[str, int]:
    host, _, port = sharing.listen.rpartition(":")
    return host.strip("[]"), int(port)


def public_url(sharing: SharingConfig) -> str:
    """Where recipients reach the server: ``public_url``, else ``http://<listen>``."""
    return (sharing.public_url or f"http://{sharing.listen}").rstrip("/")


def endpoint(sharing: SharingConfig) -> str:
    """The Delta Sharing endpoint a profile names."""
    return public_url(sharing) + PREFIX


def iceberg_uri(sharing: SharingConfig) -> str:
    """The Iceberg REST catalog's URI a client is given (its routes start at ``<uri>/v1``)."""
    return public_url(sharing) + ICEBERG_PREFIX


def iceberg_service(service: SharingService) -> IcebergService:
    """The Iceberg REST catalog over ``service``'s catalog, tokens and signing key."""
    vendor = CredentialVendor(service.signer, endpoint=service.public_url + STORAGE,
                              lifetime_seconds=service.url_lifetime_seconds)
    return IcebergService(service, vendor)


def signing_key(sharing: SharingConfig, store: TokenStore) -> bytes:
    if sharing.signing_key_env is None:
        return store.signing_key()
    value = os.environ.get(sharing.signing_key_env, "")
    if len(value) < MIN_KEY:
        raise SharingError(f"sharing.signing_key_env: the variable {sharing.signing_key_env} is unset or shorter than "
                           f"{MIN_KEY} characters; set it to a random key (e.g. `openssl rand -hex 32`) in every server")
    return value.encode()


def read_audit(config: IncsyncConfig, catalogs: LiveCatalog) -> ReadAudit:
    """Where reads are logged: ``share_reads`` in the transfer log's warehouse with ``audit:``, else the server's log."""
    if config.audit is None:
        return LoggedReads()
    return WarehouseReads(lambda: catalogs.current().config, staging_dir=default_staging_dir)


def build_service(config_file: Path, config: IncsyncConfig | None = None) -> SharingService:
    """The service of ``config_file``; its catalog follows the file as it changes. ``service.audit.close()`` when
    done commits the reads still buffered."""
    config = config or load_config(config_file)
    store = token_store(config_file, config.sharing)
    catalogs = LiveCatalog(config_file, load_config)
    return SharingService(catalogs=catalogs.current, store=store,
                          signer=UrlSigner(signing_key(config.sharing, store)), public_url=public_url(config.sharing),
                          url_lifetime_seconds=config.sharing.url_lifetime_seconds, audit=read_audit(config, catalogs))


def profile(sharing: SharingConfig, minted: Minted) -> dict[str, Any]:
    """A Delta Sharing profile file's contents (its format is the protocol's): the one place the token is written."""
    expires = datetime.fromtimestamp(minted.record.expires_at, timezone.utc)
    return {"shareCredentialsVersion": 1, "endpoint": endpoint(sharing), "bearerToken": minted.token,
            "expirationTime": expires.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}


def iceberg_settings(sharing: SharingConfig, minted: Minted, warehouse: str) -> dict[str, str]:
    """How a client opens the recipient's Iceberg REST catalog: pyiceberg's own property names
    (``RestCatalog(name, **settings)``), the token among them."""
    return {"uri": iceberg_uri(sharing), "token": minted.token, "warehouse": warehouse}


def write_profile(path: Path, contents: dict[str, Any]) -> None:
    """Write a profile readable by its owner only: it holds a bearer token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(contents, out, indent=2)
        out.write("\n")


def _uvicorn(service: SharingService, host: str, port: int, *, own_logging: bool, extra: Sequence[BaseRoute] = (),
             hidden: tuple[str, ...] = ()) -> uvicorn.Server:
    """``own_logging``: uvicorn configures logging (a process of its own); else the host process's stays as it is.
    ``extra`` routes (onboarding's) are served beside the sharing ones; paths under ``hidden`` are logged shortened."""
    # uvicorn's own access log prints every path, signed file URLs included; the app logs requests itself.
    options: dict[str, Any] = {} if own_logging else {"log_config": None}
    app = build_app(service, iceberg_service(service), extra=extra, hidden=hidden)
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, access_log=False,
                                         server_header=False, lifespan="off", **options))


def serve(config_file: Path, *, announce: Callable[[str], object] = print,
          extra: Callable[[Path, IncsyncConfig], tuple[Sequence[BaseRoute], tuple[str, ...]]] | None = None) -> None:
    """Run the server of ``config_file`` until interrupted; ``extra(config_file, config)``: more routes and their
    hidden prefixes (onboarding's)."""
    config = load_config(config_file)
    routes, hidden = extra(config_file, config) if extra is not None else ((), ())
    service = build_service(config_file, config)
    host, port = listen_address(config.sharing)
    announce(f"incsync serve: Delta Sharing at {endpoint(config.sharing)}, Iceberg REST catalog at "
             f"{iceberg_uri(config.sharing)} (listening on {host}:{port})")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    sharing_log = logging.getLogger("incsync.sharing")
    sharing_log.addHandler(handler)
    sharing_log.setLevel(logging.INFO)
    try:
        _uvicorn(service, host, port, own_logging=True, extra=routes, hidden=hidden).run()
    finally:
        service.audit.close()


class ServerThread:
    """The server on a thread of this process, started and stopped around tests or a demo."""

    def __init__(self, service: SharingService, *, host: str = "127.0.0.1", port: int, extra: Sequence[BaseRoute] = (),
                 hidden: tuple[str, ...] = ()) -> None:
        self.service = service
        self.server = _uvicorn(service, host, port, own_logging=False, extra=extra, hidden=hidden)
        self.thread = threading.Thread(target=self.server.run, name="incsync-sharing", daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise SharingError("the sharing server stopped as it started; see its log")
            threading.Event().wait(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.service.audit.close()

"""The sharing server's state and its answers that need no table read: who a bearer token is, the share, schema
and table lists, finding a caller's table, signing its files' URLs and checking a signed URL on the way back.

A recipient only ever sees its own share; anything else, existing or not, is one and the same 404.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from incsync.sharing.audit import LoggedReads, ReadAudit
from incsync.sharing.catalog import Catalog, RecipientShare, SharedTable
from incsync.sharing.delta_log import DataFile, has_log
from incsync.sharing.presign import presigned_get
from incsync.sharing.protocol import PREFIX, Answer, Caller, ProtocolError, not_found, page
from incsync.sharing.signing import FileGrant, UrlSigner
from incsync.sharing.tokens import TokenStore

log = logging.getLogger(__name__)


def unauthenticated() -> ProtocolError:
    return ProtocolError(401, "UNAUTHENTICATED", "The bearer token is missing, wrong, expired or revoked.")


class SharingService:
    """Everything an answer needs: the catalog of the moment, the token store, the URL signer and the read audit."""

    def __init__(self, *, catalogs: Callable[[], Catalog], store: TokenStore, signer: UrlSigner, public_url: str,
                 url_lifetime_seconds: int, clock: Callable[[], float] = time.time, audit: ReadAudit | None = None) -> None:
        self.catalogs = catalogs
        self.store = store
        self.signer = signer
        self.public_url = public_url.rstrip("/")
        self.url_lifetime_seconds = url_lifetime_seconds
        self.clock = clock
        self.audit: ReadAudit = audit or LoggedReads()

    def caller(self, authorization: str | None) -> Caller:
        scheme, _, token = (authorization or "").partition(" ")
        record = self.store.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if record is None:
            raise unauthenticated()
        return Caller(recipient=record.recipient, token_id=record.id)

    def _share(self, caller: Caller, name: str) -> RecipientShare:
        share = self.catalogs().share(caller.recipient, name)
        if share is None:
            raise not_found()
        return share

    def list_shares(self, caller: Caller, params: dict[str, str]) -> Answer:
        share = self.catalogs().share_of(caller.recipient)
        return Answer(json=page([] if share is None else [{"name": share.name}], params))

    def get_share(self, caller: Caller, params: dict[str, str], *, share: str) -> Answer:
        return Answer(json={"share": {"name": self._share(caller, share).name}})

    def list_schemas(self, caller: Caller, params: dict[str, str], *, share: str) -> Answer:
        found = self._share(caller, share)
        return Answer(json=page([{"name": s, "share": found.name} for s in found.schemas()], params))

    def list_tables(self, caller: Caller, params: dict[str, str], *, share: str, schema: str) -> Answer:
        found = self._share(caller, share)
        if not found.has_schema(schema):
            raise not_found()
        return Answer(json=page([_item(t) for t in found.in_schema(schema) if _exists(t)], params))

    def list_all_tables(self, caller: Caller, params: dict[str, str], *, share: str) -> Answer:
        return Answer(json=page([_item(t) for t in self._share(caller, share).tables if _exists(t)], params))

    def table(self, caller: Caller, share: str, schema: str, name: str) -> SharedTable:
        table = self._share(caller, share).table(schema, name)
        if table is None or not _exists(table):
            raise not_found()
        return table

    def file_urls(self, caller: Caller, table: SharedTable) -> tuple[Callable[[DataFile], str], int]:
        """A function giving each file of ``table`` its signed URL, and when those URLs expire (epoch ms)."""
        expires = int((self.clock() + self.url_lifetime_seconds) * 1000)

        if table.remote:  # on S3: the bucket serves the file, through a URL pre-signed with the destination's key
            when = datetime.fromtimestamp(self.clock(), timezone.utc)

            def presigned(file: DataFile) -> str:
                return presigned_get(file.key(table.root), table.options, expires_seconds=self.url_lifetime_seconds, now=when)

            return presigned, expires

        def url(file: DataFile) -> str:
            grant = FileGrant(recipient=caller.recipient, token_id=caller.token_id, share=table.share, schema=table.schema,
                              table=table.name, path=file.path, expires_ms=expires)
            return f"{self.public_url}{PREFIX}/files/{self.signer.sign(grant)}"

        return url, expires

    def file(self, signed: str) -> Path | None:
        """The local file a signed URL names, while the URL, its token and the table's place in the share hold."""
        grant = self.signer.verify(signed, now_ms=int(self.clock() * 1000))
        if grant is None or not self.store.is_live(grant.token_id):
            return None
        share = self.catalogs().share(grant.recipient, grant.share)
        table = share.table(grant.schema, grant.table) if share is not None else None
        if table is None or table.remote:
            return None
        root = Path(table.root).resolve()
        path = (root / unquote(grant.path)).resolve()
        return path if path.is_relative_to(root) and path.is_file() else None

    def check_owner(self, table: SharedTable, owner: str | None) -> None:
        """Refuse a table stamped for another recipient: the configuration moved under a copy (docs/design.md#ownership)."""
        if owner != table.recipient:
            log.warning("share %s, table %s.%s: the %s table is stamped for %s, not recipient %s; refused",
                        table.share, table.schema, table.name, table.format.capitalize(), owner or "no recipient",
                        table.recipient)
            raise not_found()


def _item(table: SharedTable) -> dict[str, Any]:
    return {"name": table.name, "schema": table.schema, "share": table.share}


_REMOTE_SEEN: set[str] = set()  # S3 tables whose log was found: a table, once created, stays (one listing each)


def _exists(table: SharedTable) -> bool:
    if not table.remote:
        return (Path(table.root) / "_delta_log").is_dir()
    if table.root not in _REMOTE_SEEN and has_log(table.root, options=table.options):
        _REMOTE_SEEN.add(table.root)
    return table.root in _REMOTE_SEEN

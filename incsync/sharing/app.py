"""The HTTP face of the sharing server (Starlette): the Delta Sharing routes under ``/delta-sharing``, the signed
file endpoint, the Iceberg REST catalog's routes under ``/iceberg`` (``iceberg.routes``), each protocol's error
shape, and an access log that never prints a token or a signed URL.

Every route but the file endpoint needs a live bearer token. Table reads run in Starlette's thread pool: they
block on delta-rs and SQLite.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from incsync.sharing import reads
from incsync.sharing.catalog import SharedTable
from incsync.sharing.errors import Unavailable
from incsync.sharing.iceberg.answers import IcebergService
from incsync.sharing.iceberg.api import PREFIX as ICEBERG_PREFIX
from incsync.sharing.iceberg.api import RestError
from incsync.sharing.iceberg.routes import error as iceberg_error
from incsync.sharing.iceberg.routes import routes as iceberg_routes
from incsync.sharing.protocol import (
    CAPABILITIES_HEADER,
    FILE_ID_HASH_HEADER,
    NDJSON,
    PREFIX,
    Answer,
    Caller,
    ProtocolError,
    invalid,
)
from incsync.sharing.service import SharingService

log = logging.getLogger(__name__)
access = logging.getLogger("incsync.sharing.access")

TABLE = PREFIX + "/shares/{share}/schemas/{schema}/tables/{table}"
FILES = PREFIX + "/files/"


def _error(exc: ProtocolError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse({"errorCode": exc.code, "message": exc.message}, status_code=exc.status, headers=headers)


def _render(answer: Answer) -> Response:
    if answer.lines is not None:
        body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in answer.lines)
        return Response(body, media_type=NDJSON, headers=answer.headers)
    if answer.json is not None:
        return JSONResponse(answer.json, headers=answer.headers, media_type="application/json; charset=utf-8")
    return Response(b"", headers=answer.headers)


def _file_id_hash(request: Request) -> dict[str, str]:
    value = request.headers.get(FILE_ID_HASH_HEADER)
    if value is None:
        return {}
    if value.lower() not in ("parquet", "delta"):
        raise invalid("fileidhash must be parquet or delta")
    return {FILE_ID_HASH_HEADER: value.lower()}


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise ProtocolError(400, "MALFORMED_REQUEST", "The request body is not JSON.") from None
    if not isinstance(body, dict):
        raise ProtocolError(400, "MALFORMED_REQUEST", "The request body must be a JSON object.")
    return body


def _endpoint(
    service: SharingService, answer: Callable[..., Answer], *, table: bool = False, body: bool = False,
) -> Callable[[Request], Awaitable[Response]]:
    """A route answering in the thread pool: ``answer(caller, params, **path parameters)``, or for a table route
    ``answer(service, caller, table, params, capabilities header)``; params are the query's or the JSON body."""

    async def endpoint(request: Request) -> Response:
        try:
            caller = await run_in_threadpool(service.caller, request.headers.get("authorization"))
            request.state.recipient = caller.recipient
            payload = await _body(request) if body else dict(request.query_params)
            extra = _file_id_hash(request) if table else {}

            def call() -> Answer:
                names = request.path_params
                if not table:
                    return answer(caller, payload, **names)
                found = service.table(caller, names["share"], names["schema"], names["table"])
                return answer(service, caller, found, payload, request.headers.get(CAPABILITIES_HEADER))

            result = await run_in_threadpool(call)
            result.headers.update(extra)
        except ProtocolError as exc:
            return _error(exc)
        except Unavailable as exc:
            return _error(invalid(str(exc)))
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return JSONResponse({"errorCode": "INTERNAL_ERROR", "message": ""}, status_code=500)
        return _render(result)

    return endpoint


def _table_version(service: SharingService, caller: Caller, table: SharedTable, params: dict[str, str],
                   capabilities: str | None) -> Answer:
    return reads.table_version(service, caller, table, params)  # the version answers in no format


def build_app(service: SharingService, iceberg: IcebergService | None = None, *, extra: Sequence[BaseRoute] = (),
              hidden: tuple[str, ...] = ()) -> Starlette:
    """The server's app; ``extra`` routes (onboarding's) come first, and the access log shortens paths starting
    with a ``hidden`` prefix (a path holding a token) as it does signed file URLs."""
    async def files(request: Request) -> Response:
        path = await run_in_threadpool(service.file, request.path_params["signed"])
        if path is None:
            return Response(status_code=403)  # a bare refusal: which check failed is nobody's business
        return FileResponse(path, media_type="application/octet-stream")

    routes: list[BaseRoute] = [
        Route(PREFIX + "/shares", _endpoint(service, service.list_shares)),
        Route(PREFIX + "/shares/{share}", _endpoint(service, service.get_share)),
        Route(PREFIX + "/shares/{share}/schemas", _endpoint(service, service.list_schemas)),
        Route(PREFIX + "/shares/{share}/schemas/{schema}/tables", _endpoint(service, service.list_tables)),
        Route(PREFIX + "/shares/{share}/all-tables", _endpoint(service, service.list_all_tables)),
        Route(TABLE, _endpoint(service, _table_version, table=True), methods=["HEAD"]),
        Route(TABLE + "/version", _endpoint(service, _table_version, table=True)),
        Route(TABLE + "/metadata", _endpoint(service, reads.table_metadata, table=True)),
        Route(TABLE + "/query", _endpoint(service, reads.query, table=True, body=True), methods=["POST"]),
        Route(TABLE + "/changes", _endpoint(service, reads.changes, table=True)),
        Route(FILES + "{signed}", files, methods=["GET", "HEAD"]),
    ]
    if iceberg is not None:
        routes += iceberg_routes(iceberg, public_path=urlsplit(service.public_url).path.rstrip("/"))
    return Starlette(routes=[*extra, *routes], middleware=[Middleware(AccessLog, hidden=(FILES, *hidden))],
                     exception_handlers={404: _unknown_route, 405: _unknown_route})


async def _unknown_route(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    if request.url.path.startswith(ICEBERG_PREFIX + "/"):
        return iceberg_error(RestError(status, "NoSuchRouteException" if status == 404 else "MethodNotAllowedException",
                                       "No such route." if status == 404 else "Method not allowed."))
    return JSONResponse({"errorCode": "RESOURCE_DOES_NOT_EXIST" if status == 404 else "MALFORMED_REQUEST",
                         "message": "No such API." if status == 404 else "Method not allowed."}, status_code=status)


class AccessLog:
    """One line per request: method, path (a signed URL shortened to its route), status, recipient, time."""

    def __init__(self, app: ASGIApp, hidden: tuple[str, ...] = (FILES,)) -> None:
        self.app = app
        self.hidden = hidden

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [0]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = scope["path"]
            shown = next((prefix + "..." for prefix in self.hidden if path.startswith(prefix)), path)
            recipient = scope.get("state", {}).get("recipient", "-")
            access.info("%s %s %s recipient=%s %.1fms", scope["method"], shown, status[0], recipient,
                        (time.perf_counter() - started) * 1000)

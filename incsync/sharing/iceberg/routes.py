"""The HTTP face of the Iceberg REST catalog (Starlette routes under ``/iceberg``): its read routes, a 403 for
every write route of the spec, and the S3-compatible endpoint serving the tables' data files (from this machine,
or from the provider's bucket for a table on S3).

Every catalog route needs a live bearer token (the one Delta Sharing takes); the storage endpoint takes the
credentials a table was loaded with. Answers are computed in Starlette's thread pool: they block on SQLite
and file reads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from incsync.sharing.iceberg.answers import IcebergService, StoredObject, parse_body
from incsync.sharing.iceberg.api import PREFIX, STORAGE, RestError, read_only
from incsync.sharing.iceberg.credentials import BUCKET
from incsync.sharing.protocol import Caller

log = logging.getLogger(__name__)

V1 = PREFIX + "/v1"
CATALOG = V1 + "/{prefix}"
NAMESPACE = CATALOG + "/namespaces/{namespace}"
TABLE = NAMESPACE + "/tables/{table}"
# The spec's routes that change a catalog, by method: all refused, this catalog is read-only.
WRITES = [
    (CATALOG + "/namespaces", "POST"), (NAMESPACE, "DELETE"), (NAMESPACE + "/properties", "POST"),
    (NAMESPACE + "/tables", "POST"), (TABLE, "POST"), (TABLE, "DELETE"), (TABLE + "/metrics", "POST"),
    (NAMESPACE + "/register", "POST"), (CATALOG + "/tables/rename", "POST"), (CATALOG + "/transactions/commit", "POST"),
    (NAMESPACE + "/views", "POST"), (NAMESPACE + "/views/{view}", "POST"), (NAMESPACE + "/views/{view}", "DELETE"),
    (NAMESPACE + "/register-view", "POST"), (CATALOG + "/views/rename", "POST"),
]
ACCESS_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied'
                 b'</Message></Error>')


def error(exc: RestError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


Answer = Callable[..., dict[str, Any] | None]


def _endpoint(iceberg: IcebergService, answer: Answer, *, body: bool = False, params: bool = True,
              status: int = 200) -> Callable[[Request], Awaitable[Response]]:
    """A route answering ``answer(caller, [params or body,] **path parameters)`` in the thread pool."""

    async def endpoint(request: Request) -> Response:
        try:
            caller: Caller = await run_in_threadpool(iceberg.caller, request.headers.get("authorization"))
            request.state.recipient = caller.recipient
            args: list[Any] = [parse_body(await request.body())] if body else [dict(request.query_params)] if params else []
            found = await run_in_threadpool(lambda: answer(caller, *args, **request.path_params))
        except RestError as exc:
            return error(exc)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error(RestError(500, "ServiceFailureException", "The server failed; the provider's log says why."))
        if request.method == "HEAD" or found is None:
            return Response(status_code=204)
        return JSONResponse(found, status_code=status)

    return endpoint


def _refused(iceberg: IcebergService) -> Callable[[Request], Awaitable[Response]]:
    def refuse(caller: Caller, **_: str) -> None:
        raise read_only()

    return _endpoint(iceberg, refuse, params=False)


def _no_plan(kind: str) -> Answer:
    def answer(caller: Caller, *_: object, **__: str) -> None:
        raise RestError(404, kind, "No such plan: this server completes every plan in its first answer.")

    return answer


def _storage(iceberg: IcebergService, public_path: str) -> Callable[[Request], Awaitable[Response]]:
    """The S3-compatible GetObject and HeadObject of the tables' data files; anything refused is one bare 403."""

    async def storage(request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()
        path = raw.decode("latin-1")
        if public_path and not path.startswith(public_path + STORAGE):
            path = public_path + path  # a proxy took the public URL's path off: the client signed it on
        headers: dict[str, str] = {}
        for key, value in request.scope["headers"]:  # a repeated header signs as its values joined by commas
            name = key.decode("latin-1").lower()
            headers[name] = f"{headers[name]},{value.decode('latin-1')}" if name in headers else value.decode("latin-1")

        def find() -> Any:
            grant = iceberg.vendor.check(method=request.method, path=path, query=request.url.query, headers=headers,
                                         now=iceberg.service.clock())
            if grant is None or request.path_params["bucket"] != BUCKET:
                return None
            request.state.recipient = grant.recipient
            return iceberg.file(grant, request.path_params["key"])

        found = await run_in_threadpool(find) if request.method in ("GET", "HEAD") else None
        if found is None:
            return Response(ACCESS_DENIED, status_code=403, media_type="application/xml")
        if isinstance(found, StoredObject):
            return _proxied(found, request)
        return FileResponse(found, media_type="application/octet-stream")

    return storage


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _proxied(found: StoredObject, request: Request) -> Response:
    """GetObject or HeadObject of an object of the provider's bucket, a byte range of it when asked (one range,
    as S3 serves), streamed from the bucket."""
    size = found.size
    headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
    if found.mtime is not None:
        headers["Last-Modified"] = formatdate(found.mtime.timestamp(), usegmt=True)
    start, end, status = 0, size - 1, 200
    asked = request.headers.get("range")
    if asked:
        match = _RANGE.match(asked.strip())
        first, last = (match.group(1), match.group(2)) if match else ("", "")
        if match and first:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
        elif match and last:
            start, end = max(size - int(last), 0), size - 1
        if not match or (not first and not last) or start >= size or start > end:
            return Response(status_code=416, headers={"Content-Range": f"bytes */{size}"})
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    length = end - start + 1 if size else 0
    headers["Content-Length"] = str(length)
    if request.method == "HEAD" or not length:
        return Response(status_code=status, headers=headers)
    return StreamingResponse(found.read(start, length), status_code=status, headers=headers)


def routes(iceberg: IcebergService, *, public_path: str = "") -> list[BaseRoute]:
    """The catalog's routes; ``public_path``: the path of the server's public URL (``/x`` of ``https://h/x``)."""
    read: list[BaseRoute] = [
        Route(V1 + "/config", _endpoint(iceberg, iceberg.config)),
        Route(CATALOG + "/namespaces", _endpoint(iceberg, iceberg.list_namespaces)),
        Route(NAMESPACE, _endpoint(iceberg, iceberg.namespace, params=False), methods=["GET", "HEAD"]),
        Route(NAMESPACE + "/tables", _endpoint(iceberg, iceberg.list_tables)),
        Route(TABLE, _endpoint(iceberg, iceberg.load_table), methods=["GET", "HEAD"]),
        Route(TABLE + "/credentials", _endpoint(iceberg, iceberg.load_credentials)),
        Route(TABLE + "/plan", _endpoint(iceberg, iceberg.plan, body=True), methods=["POST"]),
        Route(TABLE + "/plan/{plan_id}", _endpoint(iceberg, _no_plan("NoSuchPlanIdException")), methods=["GET", "DELETE"]),
        Route(TABLE + "/tasks", _endpoint(iceberg, _no_plan("NoSuchPlanTaskException"), body=True), methods=["POST"]),
        Route(STORAGE + "/{bucket}/{key:path}", _storage(iceberg, public_path), methods=["GET", "HEAD", "PUT", "POST", "DELETE"]),
    ]
    return read + [Route(path, _refused(iceberg), methods=[method]) for path, method in WRITES]

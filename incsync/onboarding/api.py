"""The provider's JSON API on `incsync serve` (under ``/provider/v1``): the operations of `incsync onboard`, for
the provider's own systems. Every route needs the admin bearer token (``onboarding.admin_token_env`` or
``admin_token_secret``); without one configured, every request is refused."""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from incsync.errors import IncsyncError
from incsync.onboarding.errors import OnboardingError, UnknownRecipient
from incsync.onboarding.service import Onboarding

log = logging.getLogger(__name__)

PREFIX = "/provider/v1"
ACTOR = "api"
MIN_TOKEN = 32


def admin_token(onboarding: Onboarding) -> str | None:
    """The admin token as configured (the vault entry or the variable), or None when it is unset or too short."""
    settings = onboarding.place.settings
    if settings.admin_token_secret is not None:
        from incsync.secrets.stores import open_secret

        ref = replace(settings.admin_token_secret, vault=onboarding.place.vault)
        try:
            value: str | None = open_secret(ref, used_by="onboarding.admin_token_secret").get_secret_value()
        except IncsyncError as exc:
            log.warning("provider API refused: %s", exc)
            return None
    else:
        value = os.environ.get(settings.admin_token_env)
    return value if value is not None and len(value) >= MIN_TOKEN else None


def _authorized(onboarding: Onboarding, header: str | None) -> bool:
    expected = admin_token(onboarding)
    scheme, _, given = (header or "").partition(" ")
    return expected is not None and scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), expected.encode())


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


Handler = Callable[[Onboarding, dict[str, Any], dict[str, str]], Any]


def _route(onboarding: Onboarding, link_url: Callable[[str], str], handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if not await run_in_threadpool(_authorized, onboarding, request.headers.get("authorization")):
            return JSONResponse({"error": "a valid admin bearer token is required"}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        body: dict[str, Any] = {}
        if request.method == "POST":
            try:
                raw = await request.json() if (await request.body()).strip() else {}
            except ValueError:
                return _problem(400, "the request body is not JSON")
            if not isinstance(raw, dict):
                return _problem(400, "the request body must be a JSON object")
            body = raw
        params = {**request.query_params, **request.path_params}
        try:
            result = await run_in_threadpool(handler, onboarding, body, params)
        except UnknownRecipient as exc:
            return _problem(404, str(exc))
        except IncsyncError as exc:
            return _problem(400, str(exc))
        if isinstance(result, dict) and "token" in result:  # a link: its URL, the one time it is shown
            result = {**{k: v for k, v in result.items() if k != "token"}, "url": link_url(result["token"])}
        return JSONResponse(result)

    return endpoint


def _strings(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OnboardingError(f"{what} must be a list of strings")
    return value


def _create(o: Onboarding, body: dict[str, Any], params: dict[str, str]) -> Any:
    if not isinstance(body.get("id"), str) or not isinstance(body.get("id_in_provider_system"), str):
        raise OnboardingError("give `id` and `id_in_provider_system` (strings)")
    return o.create(body["id"], id_in_provider_system=body["id_in_provider_system"],
                    products=_strings(body.get("products"), "products"), tier=body.get("tier"), actor=ACTOR).as_json()


def _attach(o: Onboarding, body: dict[str, Any], params: dict[str, str]) -> Any:
    return o.attach(params["recipient"], products=_strings(body.get("products"), "products"), tier=body.get("tier"),
                    actor=ACTOR).as_json()


def _link(o: Onboarding, body: dict[str, Any], params: dict[str, str]) -> Any:
    issued = o.link(params["recipient"], actor=ACTOR)
    return {"recipient": issued.link.recipient, "link": issued.link.id, "token": issued.token,
            "expires_at": issued.link.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def routes(onboarding: Onboarding, link_url: Callable[[str], str]) -> list[BaseRoute]:
    """The API's routes; ``link_url(token)`` is a link as the recipient opens it."""
    def route(path: str, handler: Handler, method: str) -> Route:
        return Route(PREFIX + path, _route(onboarding, link_url, handler), methods=[method])

    return [
        route("/recipients", lambda o, b, p: [s.as_json() for s in o.states()], "GET"),
        route("/recipients", _create, "POST"),
        route("/recipients/{recipient}", lambda o, b, p: o.status(p["recipient"]).as_json(), "GET"),
        route("/recipients/{recipient}/attach", _attach, "POST"),
        route("/recipients/{recipient}/link", _link, "POST"),
        route("/recipients/{recipient}/revoke", lambda o, b, p: {"revoked": o.revoke(p["recipient"], actor=ACTOR)},
              "POST"),
        route("/audit", lambda o, b, p: [r.as_json() for r in o.audit_rows(p.get("recipient"))], "GET"),
    ]

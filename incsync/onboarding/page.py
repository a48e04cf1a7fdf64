"""The recipient's page on `incsync serve` (``/onboard/<token>``): the link opens a form per kind the provider
allows; "Test connection" runs the destination's own checks, "Save" stores it; afterwards the link shows the
recipient its status. Every post carries the CSRF token of the link and the browser's session, comes from the
server's own origin and names the link's recipient; links that fail to open count against the client's limit.
A refused request says nothing of the recipient or of which check failed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from incsync.config.load import load_config
from incsync.onboarding import connect, forms, guard, html, links
from incsync.onboarding.errors import OnboardingError
from incsync.onboarding.links import Link, now_utc
from incsync.onboarding.place import Place
from incsync.onboarding.store import Store

log = logging.getLogger(__name__)

NOT_VALID = "This link is not valid: it may have expired or been replaced. Ask your provider for a new one."
REFUSED = "This request was refused. Open your link again and retry."
TOO_MANY = "Too many attempts from your address; wait a minute and retry."
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "Referrer-Policy": "same-origin", "Cache-Control": "no-store", "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}

MAX_FORM = 64 * 1024
Failures = Callable[[str], list[str]]


class RecipientPage:
    """The page's state: onboarding's place, the CSRF key, the limiter and the public origin."""

    def __init__(self, place: Place, *, public_url: str, failures: Failures | None = None) -> None:
        self.place = place
        self.store = Store(place)
        self.key = b""  # the CSRF key every process on these tables shares, read on the first request
        self.limit = guard.RateLimit(place.settings.attempts_per_minute)
        # Each test connects from the provider's network to a host the recipient names: a link may not probe it fast.
        self.tests = guard.RateLimit(place.settings.attempts_per_minute)
        self.origins = {guard.origin(public_url)}
        self.secure = public_url.startswith("https://")
        self.failures = failures

    def _html(self, text: str, status: int = 200, session: str | None = None) -> Response:
        answer = HTMLResponse(text, status_code=status, headers=HEADERS)
        if session is not None:
            answer.set_cookie(guard.SESSION_COOKIE, session, httponly=True, samesite="strict", secure=self.secure,
                              path="/onboard/")
        return answer

    def _link(self, token: str) -> Link | None:
        with self.store.connect() as conn:
            return links.find(conn, self.place, token)

    def _status(self, link: Link) -> str:
        config = load_config(self.place.file)
        recipient = next((r for r in config.recipients if r.id == link.recipient), None)
        kind = config.destination(recipient.destination).kind if recipient is not None else None
        failures: list[str] = []
        if self.failures is not None:
            try:
                failures = self.failures(link.recipient)
            except Exception:  # the runs cannot be read: the status shows the copies, and the log says why
                log.exception("onboarding: the failures of recipient %s cannot be read", link.recipient)
        return html.status(recipient=link.recipient, kind=kind, models=connect.status(config, link.recipient),
                           failures=failures)

    def _form(self, link: Link, session: str, kind: str, **extra: Any) -> str:
        kinds = self.place.settings.kinds
        return html.form(recipient=link.recipient, kinds=kinds, kind=kind, inputs=forms.inputs(kind),
                         csrf=guard.csrf_token(self.key, link.id, session), **extra)

    async def _open(self, request: Request) -> tuple[Link | None, Response | None]:
        """The link of the request's path when it opens; else the refusal to answer."""
        client = request.client.host if request.client else "-"
        if self.limit.blocked(client):
            return None, self._html(html.refused(TOO_MANY), 429)
        if not self.key:
            self.key = await run_in_threadpool(self.store.key, "csrf")
        link = await run_in_threadpool(self._link, request.path_params["token"])
        state = link.state(now_utc()) if link is not None else "unknown"
        if link is None or state in ("expired", "revoked"):
            self.limit.failed(client)
            return None, self._html(html.refused(NOT_VALID), 404)
        return link, None

    async def get(self, request: Request) -> Response:
        link, refusal = await self._open(request)
        if link is None:
            return refusal or self._html(html.refused(NOT_VALID), 404)
        if link.state(now_utc()) == "used":
            return self._html(await run_in_threadpool(self._status, link))
        session = request.cookies.get(guard.SESSION_COOKIE) or guard.new_session()
        kinds = self.place.settings.kinds
        kind = request.query_params.get("kind", kinds[0])
        return self._html(self._form(link, session, kind if kind in kinds else kinds[0]), session=session)

    async def post(self, request: Request) -> Response:
        link, refusal = await self._open(request)
        if link is None:
            return refusal or self._html(html.refused(NOT_VALID), 404)
        client = request.client.host if request.client else "-"
        form = await _form(request)
        session = request.cookies.get(guard.SESSION_COOKIE)
        allowed = self.origins | {guard.origin(str(request.base_url))}
        if (link.state(now_utc()) != "live" or not guard.same_origin(allowed, dict(request.headers))
                or not guard.csrf_ok(self.key, link.id, session, form.get("csrf"))
                or form.get("recipient") != link.recipient or form.get("kind") not in self.place.settings.kinds):
            self.limit.failed(client)
            log.warning("onboarding: a post on link %s was refused", link.id)
            return self._html(html.refused(REFUSED), 403)
        assert session is not None
        kind = form["kind"]
        if self.tests.blocked(link.id):
            return self._html(html.refused(TOO_MANY), 429)
        self.tests.failed(link.id)
        entered = forms.entered(kind, form, destination=connect.destination_name(link.recipient),
                                secret_ref=connect.secret_ref(link.recipient))
        if entered.problems:
            return self._html(self._form(link, session, kind, entered=entered), 400)
        problem = await run_in_threadpool(connect.test, self.place, link.recipient, entered)
        if problem is not None:
            return self._html(self._form(link, session, kind, entered=entered, outcome=f"Connection failed: {problem}"), 400)
        if form.get("action") != "save":
            return self._html(self._form(link, session, kind, entered=entered, ok=True,
                                         outcome="Connection works: the destination can be reached and is free. Type "
                                                 "the secret again and save."))
        try:
            await run_in_threadpool(connect.save, self.place, link, entered)
        except OnboardingError:
            return self._html(html.refused(NOT_VALID), 404)
        return RedirectResponse(str(request.url), status_code=303, headers=HEADERS)


async def _form(request: Request) -> dict[str, str]:
    """An url-encoded form's fields (the page posts nothing else), the first value of each; at most MAX_FORM bytes."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return {}
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def routes(page: RecipientPage) -> list[BaseRoute]:
    def wrap(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception:
                log.exception("onboarding page: %s failed", request.method)
                return HTMLResponse(html.refused("Something went wrong on our side; retry in a moment."), 500,
                                    headers=HEADERS)

        return endpoint

    return [Route("/onboard/{token}", wrap(page.get), methods=["GET"]),
            Route("/onboard/{token}", wrap(page.post), methods=["POST"])]

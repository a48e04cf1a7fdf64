"""The onboarding page's defences: a session cookie per browser and a CSRF token bound to it and to the link, a
same-origin check of every form post (Origin, else Referer), and a per-client limit on links that fail to open
(guessing). A refusal says nothing of the recipient or of which check failed."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import deque
from urllib.parse import urlsplit

SESSION_COOKIE = "incsync_onboard_session"
WINDOW_SECONDS = 60.0


def new_session() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(key: bytes, link_id: str, session: str) -> str:
    """The form's token: a MAC of the link and the browser's session, so a form is good for that pair only."""
    return hmac.new(key, f"csrf:{link_id}:{session}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(key: bytes, link_id: str, session: str | None, given: str | None) -> bool:
    if not session or not given:
        return False
    return hmac.compare_digest(csrf_token(key, link_id, session), given)


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def same_origin(allowed: set[str], headers: dict[str, str]) -> bool:
    """A post from one of the ``allowed`` origins: its Origin header, else its Referer's; neither is refused."""
    given = headers.get("origin")
    if given and given != "null":
        return given.lower() in allowed
    referer = headers.get("referer")
    return bool(referer) and origin(str(referer)) in allowed


class RateLimit:
    """At most ``per_minute`` failures per client (or tests per link) in any minute; a client over it is refused
    until it is under."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        seen = self._seen.setdefault(client, deque())
        while seen and now - seen[0] > WINDOW_SECONDS:
            seen.popleft()
        return seen

    def blocked(self, client: str, *, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            return len(self._recent(client, now)) >= self.per_minute

    def failed(self, client: str, *, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._recent(client, now).append(now)
            if len(self._seen) > 100_000:  # a flood of clients: forget the quiet ones
                for quiet in [c for c, q in self._seen.items() if not q]:
                    del self._seen[quiet]

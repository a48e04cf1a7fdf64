"""Onboarding's routes on `incsync serve`: the provider's JSON API and the recipient's page, for a file with an
``onboarding:`` section. Paths holding a link's token are logged shortened."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starlette.routing import BaseRoute

from incsync.config.model import IncsyncConfig
from incsync.onboarding import api, page
from incsync.onboarding.place import onboarding_place
from incsync.onboarding.service import Onboarding

PAGE = "/onboard/"


def public_url(config: IncsyncConfig) -> str:
    sharing = config.sharing
    return (sharing.public_url or f"http://{sharing.listen}").rstrip("/")


def server_routes(config_file: Path, config: IncsyncConfig, *,
                  failures: page.Failures | None = None) -> tuple[Sequence[BaseRoute], tuple[str, ...]]:
    """Onboarding's routes and the path prefixes the access log hides (none without ``onboarding:``);
    ``failures(recipient)``: the failures blamed on it, with their fix, for its status."""
    if config.onboarding is None:
        return (), ()
    place = onboarding_place(config, config_file)
    base = public_url(config)
    recipient_page = page.RecipientPage(place, public_url=base, failures=failures)
    return [*api.routes(Onboarding(place, config), lambda token: f"{base}{PAGE}{token}"), *page.routes(recipient_page)], (PAGE,)

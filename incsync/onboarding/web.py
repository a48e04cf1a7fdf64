"""Onboarding's routes on `incsync serve`: the provider's JSON API and the recipient's page, for a file with an
``onboarding:`` section. Paths holding a link's token are logged shortened."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starlette.routing import BaseRoute

from incsync.config.model import IncsyncConfig
from incsync.onboarding import api
from incsync.onboarding.place import onboarding_place
from incsync.onboarding.service import Onboarding

PAGE = "/onboard/"


def public_url(config: IncsyncConfig) -> str:
    sharing = config.sharing
    return (sharing.public_url or f"http://{sharing.listen}").rstrip("/")


def server_routes(config_file: Path, config: IncsyncConfig) -> tuple[Sequence[BaseRoute], tuple[str, ...]]:
    """Onboarding's routes and the path prefixes the access log hides (none without ``onboarding:``)."""
    if config.onboarding is None:
        return (), ()
    onboarding = Onboarding(onboarding_place(config, config_file), config)
    base = public_url(config)
    return [*api.routes(onboarding, lambda token: f"{base}{PAGE}{token}")], (PAGE,)

"""The `alerts:` section: where a failed transfer is posted, and which blamed parties alert."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from incsync.config.base import StrictModel

BlamedParty = Literal["provider", "recipient", "unknown"]


class AlertsConfig(StrictModel):
    """A sensor posts each failed transfer, whoever launched it (model, recipients, windows, blamed party, reason), as JSON."""

    webhook_url_env: str = Field(
        default="INCSYNC_ALERT_WEBHOOK", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the webhook URL (never the URL itself: it often "
        "holds a token). Unset at run time: the sensor skips, saying so.",
    )
    blamed: list[BlamedParty] = Field(
        default_factory=lambda: ["provider", "recipient", "unknown"], min_length=1,
        description="Which blamed parties alert: `[provider]` wakes the provider's on-call only for its own "
        "failures; `[recipient]` feeds a channel that tells customers about theirs.",
    )
    dagster_url: str = Field(
        default="", description="The Dagster UI's base URL (e.g. `https://dagster.example.com`), prefixed to the "
        "run's link path `/runs/<run id>` in each alert; empty: the path alone.",
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=120, description="How long one POST may take.")

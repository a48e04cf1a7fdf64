"""What every destination model says of where it writes, whatever its kind."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from incsync.config.base import StrictModel
from incsync.config.locations import Location, folder_or_url


class Placed(StrictModel):
    """What every destination model says of where it writes: a comparable location (``validate`` compares
    destinations by it, never by name) and a description without a secret (the transfer log's)."""

    # Several recipients may share one location (their keys apart by design): object-storage prefixes.
    shares_location: ClassVar[bool] = False
    # The field a destinations table's `secret` column fills (docs/secrets.md); None: the kind takes no secret.
    secret_field: ClassVar[str | None] = None

    def location(self, base: Path, *, folders: dict[str, str] | None = None) -> Location:
        """Where it writes; relative paths are taken against ``base`` (the config file's folder)."""
        key = folder_or_url(self.path, base, folders=folders)  # type: ignore[attr-defined]  # the path kinds'
        return Location("path", key, key)

    def location_note(self) -> str | None:
        """Why comparing this location could only be partial (an unset DSN variable), or None."""
        return None

    def described(self) -> str:
        return str(self.path)  # type: ignore[attr-defined]  # the path kinds'

    def required_variables(self) -> list[tuple[str, str, str]]:
        """(field, variable, an example value) of each environment variable a transfer here needs set."""
        return []

    def drop_hint(self, model: str, recipient: str) -> str:
        """How the provider drops one recipient's copy of ``model`` by hand."""
        return f"drop table {model} there"

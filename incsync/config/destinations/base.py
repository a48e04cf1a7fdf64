"""What every destination model says, whatever its kind: where it writes, and its starter for `incsync init`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from incsync.config.base import StrictModel
from incsync.config.locations import Location, folder_or_url

NAME_HELP = "Destination name, referenced by recipients."
CONCURRENCY_HELP = "At most this many runs publish here at once."
STORAGE_OPTIONS_HELP = ("Object-store settings in delta-rs's names (aws_region, aws_endpoint_url, ...); a secret is "
                        "`<name>_env: VARIABLE`, never its value (docs/storage.md).")


class Placed(StrictModel):
    """What every destination model says of where it writes: a comparable location (``validate`` compares
    destinations by it, never by name) and a description without a secret (the transfer log's)."""

    # The kind's entry of `incsync init`'s starter file: commented YAML, a list item indented two spaces.
    starter: ClassVar[str] = ""
    # Several recipients may share one location (their keys apart by design): object-storage prefixes.
    shares_location: ClassVar[bool] = False
    # The field a destinations table's `secret` column fills (docs/secrets.md); None: the kind takes no secret.
    secret_field: ClassVar[str | None] = None
    # What the onboarding page says of the secret a recipient types into ``secret_field`` (it is kept in the vault).
    secret_help: ClassVar[str] = "The secret; kept encrypted in the provider's vault and never shown again."
    # A model's `cluster_by` orders and prunes this kind's files; elsewhere `validate` warns that it is ignored.
    clusters_files: ClassVar[bool] = False
    # Its copies are open tables `incsync serve` hands out file URLs of (docs/sharing.md): its vacuum
    # (``retention_hours``) must outlast ``sharing.url_lifetime_seconds``, which `validate` checks.
    served_by_sharing: ClassVar[bool] = False

    @classmethod
    def starter_name(cls) -> str:
        """The destination's name in ``starter``, which the starter's recipient names."""
        found = re.search(r"^\s*- name: (\S+)", cls.starter, re.M)
        if found is None:
            raise ValueError(f"{cls.__name__}.starter lacks its `- name:` line")
        return found.group(1)

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

"""Errors of the destinations' own making (a refused publish is ``incsync.errors.PublishError``)."""

from __future__ import annotations

from incsync.errors import IncsyncError


class ManifestIntegrityError(IncsyncError):
    """A manifest's signature or a data file's checksum does not verify: the files were changed after publishing."""

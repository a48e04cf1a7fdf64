"""The vault's errors: its key, its table or an entry cannot serve; never with a secret in the message."""

from __future__ import annotations

from incsync.errors import ConfigError


class VaultError(ConfigError):
    """The vault cannot open or store an entry: its key is missing or wrong, its table unreachable, or the entry
    missing or altered. A configuration problem of the provider's, one line naming the fix."""

    def __init__(self, problem: str) -> None:
        super().__init__("vault", [problem])

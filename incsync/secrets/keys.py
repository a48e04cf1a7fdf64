"""The vault's keys: AES-256-GCM keys in one environment variable or file, the newest first.

A value is sealed under the newest key; the entry's name is its associated data, so a sealed value
copied onto another entry fails its authentication check instead of opening as that entry's secret. Each
sealed value names the key that sealed it by a short id (a hash of the key, which reveals nothing of it), so
older keys still open what they sealed and ``rotate-key`` finds what is left to re-seal.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from incsync.config.secrets import VaultPlace
from incsync.secrets.errors import VaultError

FORMAT = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
NEW_KEY_HINT = "`incsync secrets new-key` prints a new one"


def new_key() -> str:
    """A fresh key as the variable holds it (URL-safe base64 of 32 random bytes)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"incsync-vault-key-id:" + key).hexdigest()[:12]


def _associated(name: str) -> bytes:
    return f"incsync-vault-{FORMAT}:{name}".encode()


@dataclass(frozen=True)
class KeyRing:
    """The vault's keys, newest (the one that seals) first."""

    keys: tuple[bytes, ...]
    where: str  # "$INCSYNC_VAULT_KEY" or the key file, for messages

    @classmethod
    def parse(cls, text: str, *, where: str) -> KeyRing:
        parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
        if not parts:
            raise VaultError(f"{where} holds no key; put the vault's key in it ({NEW_KEY_HINT})")
        keys = []
        for i, part in enumerate(parts, start=1):
            try:
                key = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
            except ValueError:
                key = b""
            if len(key) != KEY_BYTES:
                raise VaultError(f"{where}: key {i} of {len(parts)} is not a vault key (32 bytes in URL-safe base64; "
                                 f"{NEW_KEY_HINT})")
            keys.append(key)
        return cls(tuple(keys), where)

    @classmethod
    def load(cls, place: VaultPlace) -> KeyRing:
        """The keys ``place`` names: its key file, else its variable."""
        if place.key_file:
            try:
                held = Path(place.key_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise VaultError(f"vault.key_file: cannot read {place.key_file} ({exc.strerror}); "
                                 "point it at the file holding the vault's keys") from None
            return cls.parse(held, where=f"vault key file {place.key_file}")
        text = os.environ.get(place.key_env)
        if text is None:
            raise VaultError(f"vault.key_env: variable {place.key_env} is not set; export the vault's keys in it, "
                             "newest first (docs/secrets.md)")
        return cls.parse(text, where=f"${place.key_env}")

    @property
    def primary_id(self) -> str:
        return key_id(self.keys[0])

    def ids(self) -> list[str]:
        return [key_id(k) for k in self.keys]

    def seal(self, name: str, value: str) -> str:
        """``value`` sealed under the newest key, bound to the entry ``name``."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.keys[0]).encrypt(nonce, value.encode(), _associated(name))
        return f"{FORMAT}.{self.primary_id}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, name: str, sealed: str) -> str:
        """The value of entry ``name``; a VaultError naming the entry (never its value) when it cannot be opened."""
        form, kid, body = ([*sealed.split(".", 2), "", ""])[:3]
        key = next((k for k in self.keys if key_id(k) == kid), None)
        if form != FORMAT:
            raise VaultError(f"vault entry {name} is not a sealed value of this vault; set it again "
                             f"(`incsync secrets set {name}`)")
        if key is None:
            raise VaultError(f"vault entry {name} is sealed under key {kid}, which {self.where} does not hold (it holds "
                             f"{', '.join(self.ids())}); add that key back after the newest until `incsync secrets "
                             "rotate-key` has re-sealed every entry")
        try:
            raw = base64.urlsafe_b64decode(body)
            return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated(name)).decode()
        except (InvalidTag, ValueError):
            raise VaultError(f"vault entry {name} failed its authentication check: it was altered or copied from "
                             f"another entry; set it again (`incsync secrets set {name}`)") from None

    @staticmethod
    def sealed_by(sealed: str) -> str:
        """The id of the key that sealed ``sealed``."""
        parts = sealed.split(".", 2)
        return parts[1] if len(parts) == 3 else "?"

"""The token store and the file-URL signer on their own: one live token per recipient, kept only as a digest,
expiring, rotated with an overlap, revoked at once; grants that verify only as signed and before they expire."""

from __future__ import annotations

import hashlib
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest

from incsync.sharing.errors import SharingError
from incsync.sharing.signing import FileGrant, UrlSigner
from incsync.sharing.tokens import TOKEN_PREFIX, TokenStore

HOUR = 3600.0


def test_a_token_is_256_random_bits_kept_only_as_its_sha256(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.sqlite")
    minted = store.create("acme", lifetime_seconds=HOUR)
    assert minted.token.startswith(TOKEN_PREFIX) and len(minted.token) == len(TOKEN_PREFIX) + 43
    assert minted.token not in repr(minted)
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert minted.token.encode() not in stored
    assert hashlib.sha256(minted.token.encode()).hexdigest().encode() in stored
    assert stat.S_IMODE((tmp_path / "tokens.sqlite").stat().st_mode) == 0o600
    assert store.authenticate(minted.token) == minted.record
    assert store.authenticate(minted.token + "x") is None and store.authenticate("") is None


def test_one_live_token_per_recipient_until_it_expires_or_is_revoked(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.sqlite")
    first = store.create("acme", lifetime_seconds=HOUR)
    with pytest.raises(SharingError, match="recipient acme already holds a live token; `incsync share rotate acme`"):
        store.create("acme", lifetime_seconds=HOUR)
    store.create("globex", lifetime_seconds=HOUR)  # another recipient's is its own
    assert store.authenticate(first.token, now=first.record.expires_at - 1) == first.record
    assert store.authenticate(first.token, now=first.record.expires_at) is None
    assert [r.id for r in store.revoke("acme")] == [first.record.id]
    assert store.authenticate(first.token) is None and not store.is_live(first.record.id)
    second = store.create("acme", lifetime_seconds=HOUR)
    assert [(r.id, r.state(time.time())) for r in store.tokens("acme")] == [(first.record.id, "revoked"),
                                                                             (second.record.id, "live")]


def test_rotation_keeps_the_old_token_for_the_overlap_only(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.sqlite")
    now = time.time()
    old = store.create("acme", lifetime_seconds=10 * HOUR, now=now)
    new, before = store.rotate("acme", lifetime_seconds=10 * HOUR, overlap_seconds=HOUR, now=now)
    assert [(r.id, r.expires_at) for r in before] == [(old.record.id, now + HOUR)]
    assert store.authenticate(old.token, now=now + HOUR - 1) is not None
    assert store.authenticate(old.token, now=now + HOUR) is None
    assert store.authenticate(new.token, now=now + HOUR) == new.record
    with pytest.raises(SharingError, match="recipient globex holds no live token to rotate; `incsync share create globex`"):
        store.rotate("globex", lifetime_seconds=HOUR, overlap_seconds=0)
    with pytest.raises(SharingError, match="recipient acme holds no unrevoked token tok_nope"):
        store.revoke("acme", token_id="tok_nope")


def test_every_server_on_a_store_signs_with_its_one_key(tmp_path: Path) -> None:
    key = TokenStore(tmp_path / "tokens.sqlite").signing_key()
    assert len(key) == 32 and TokenStore(tmp_path / "tokens.sqlite").signing_key() == key


def test_a_grant_verifies_only_as_signed_and_before_it_expires() -> None:
    signer = UrlSigner(b"k" * 32)
    grant = FileGrant(recipient="acme", token_id="tok_1", share="acme", schema="sales", table="orders",
                      path="part-0.parquet", expires_ms=2_000)
    signed = signer.sign(grant)
    assert signer.verify(signed, now_ms=1_999) == grant
    assert signer.verify(signed, now_ms=2_000) is None
    assert UrlSigner(b"j" * 32).verify(signed, now_ms=0) is None
    other = signer.sign(replace(grant, path="part-1.parquet"))
    assert signer.verify(other.partition(".")[0] + "." + signed.partition(".")[2], now_ms=0) is None
    for junk in ("", ".", "a.b", "é.é", signed + "x", "x" * 10_000):
        assert signer.verify(junk, now_ms=0) is None
    with pytest.raises(ValueError):
        UrlSigner(b"short")

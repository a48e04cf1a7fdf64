"""The vault's keys: AES-GCM sealing bound to the entry's name, key ids, several keys at once for rotation."""

from __future__ import annotations

import base64

import pytest

from incsync.secrets.errors import VaultError
from incsync.secrets.keys import KeyRing, key_id, new_key

PASSWORD = "Zq9-vault-distinctive-pw"


def test_a_sealed_value_opens_as_its_entry_only_and_holds_no_plaintext() -> None:
    ring = KeyRing.parse(new_key(), where="$K")
    sealed = ring.seal("acme_pg", PASSWORD)
    assert PASSWORD not in sealed and base64.b64encode(PASSWORD.encode()).decode() not in sealed
    assert sealed.startswith(f"v1.{ring.primary_id}.")
    assert ring.seal("acme_pg", PASSWORD) != sealed  # a fresh nonce each time
    assert ring.open("acme_pg", sealed) == PASSWORD
    with pytest.raises(VaultError) as copied:
        ring.open("globex_pg", sealed)  # a value copied onto another entry
    assert copied.value.problems == ["vault entry globex_pg failed its authentication check: it was altered or copied "
                                     "from another entry; set it again (`incsync secrets set globex_pg`)"]
    form, kid, body = sealed.split(".")
    flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
    with pytest.raises(VaultError, match="vault entry acme_pg failed its authentication check"):
        ring.open("acme_pg", f"{form}.{kid}.{flipped}")


def test_older_keys_open_what_they_sealed_and_the_newest_seals() -> None:
    old, new = new_key(), new_key()
    sealed_by_old = KeyRing.parse(old, where="$K").seal("acme_pg", PASSWORD)
    both = KeyRing.parse(f"{new}, {old}", where="$K")
    assert both.open("acme_pg", sealed_by_old) == PASSWORD
    assert KeyRing.sealed_by(both.seal("acme_pg", PASSWORD)) == both.primary_id == key_id(base64.urlsafe_b64decode(new))
    assert KeyRing.sealed_by(sealed_by_old) == both.ids()[1]
    only_new = KeyRing.parse(new, where="$INCSYNC_VAULT_KEY")
    with pytest.raises(VaultError) as info:
        only_new.open("acme_pg", sealed_by_old)
    assert info.value.problems == [
        f"vault entry acme_pg is sealed under key {both.ids()[1]}, which $INCSYNC_VAULT_KEY does not hold (it holds "
        f"{only_new.primary_id}); add that key back after the newest until `incsync secrets rotate-key` has re-sealed "
        "every entry"]


def test_a_wrong_key_text_is_refused_without_repeating_it() -> None:
    with pytest.raises(VaultError) as info:
        KeyRing.parse(f"{new_key()},not-a-key-Zq9", where="$INCSYNC_VAULT_KEY")
    assert info.value.problems == ["$INCSYNC_VAULT_KEY: key 2 of 2 is not a vault key (32 bytes in URL-safe base64; "
                                   "`incsync secrets new-key` prints a new one)"]
    with pytest.raises(VaultError, match=r"vault: \$K holds no key; put the vault.s key in it"):
        KeyRing.parse(" , ", where="$K")

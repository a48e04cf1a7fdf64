"""The lease (docs/design.md#lease): a transfer publishes only onto the destination state it read.

Each destination checks, inside its commit (Delta: against the version it commits on; PostgreSQL: under
the (schema, model) advisory lock; object storage: under its publish lock), that the last transfer
recorded is still the one the transfer read. A transfer that lost its lease publishes nothing and
starts over from the new state (``incsync.transfer.execute``), at most ``LEASE_ATTEMPTS`` times.
"""

from __future__ import annotations

from incsync.errors import LeaseError

# Two backfill runs of one destination: a stale writer never publishes, it redoes its work on fresh state.
LEASE_ATTEMPTS = 4


def lost_lease(*, model: str, recipient: str, where: str, read: str | None, now: str | None) -> LeaseError:
    """The error of a transfer that read transfer ``read`` as the last one, while ``now`` committed since."""
    return LeaseError(
        f"model {model}, recipient {recipient}: transfer {now} committed to {where} after this transfer read "
        f"{read}; nothing was published. Re-run the window."
    )


def check_lease(*, model: str, recipient: str, where: str, read: str | None, now: str | None) -> None:
    """Raise ``lost_lease`` unless the last transfer recorded now is the one the transfer read."""
    if read != now:
        raise lost_lease(model=model, recipient=recipient, where=where, read=read, now=now)

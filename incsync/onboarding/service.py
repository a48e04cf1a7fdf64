"""What a provider does with onboarding (the CLI and the JSON API call these): create a recipient, attach its
products and tier, issue and revoke its link, see its connection state and the audit rows. Every change and its
audit row commit in one transaction; ``actor`` says who made it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from incsync.config.base import ID_RE
from incsync.config.model import IncsyncConfig
from incsync.config.products import TIER_TAG
from incsync.onboarding import links
from incsync.onboarding.errors import OnboardingError, UnknownRecipient
from incsync.onboarding.links import Issued, Link, now_utc
from incsync.onboarding.place import Place
from incsync.onboarding.store import Store, audit, column_value, ident


@dataclass(frozen=True)
class RecipientState:
    """One recipient's connection state as the provider sees it (never a secret)."""

    id: str
    id_in_provider_system: str
    state: str  # connected, awaiting destination, disabled
    destination: str | None  # its destination row's name once connected
    kind: str | None
    products: list[str] | None
    tier: str | None
    link: str  # none, live, used, expired, revoked
    link_expires_at: str | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AuditRow:
    at: datetime
    actor: str
    action: str
    recipient: str | None
    detail: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.strftime("%Y-%m-%dT%H:%M:%SZ")}


class Onboarding:
    """Onboarding of the file ``place`` was resolved from; ``config`` names the products and tiers."""

    def __init__(self, place: Place, config: IncsyncConfig) -> None:
        self.place = place
        self.config = config
        self.store = Store(place)

    def _checked(self, products: list[str] | None, tier: str | None) -> None:
        known = [p.name for p in self.config.products]
        unknown = [p for p in products or [] if p not in known]
        if unknown:
            raise OnboardingError(f"unknown product(s) {', '.join(unknown)}; the file's products: "
                                  f"{', '.join(known) or 'none (add a `products:` section)'}")
        tiers = [t.name for t in self.config.tiers]
        if tier is not None and tier not in tiers:
            raise OnboardingError(f"unknown tier {tier}; the file's tiers: {', '.join(tiers) or 'none (add `tiers:`)'}")

    def _row(self, conn: Any, recipient: str) -> dict[str, Any]:
        cursor = conn.execute(sql.SQL("SELECT * FROM {} WHERE id = %s").format(ident(self.place.recipients_table)),
                              [recipient])
        row = cursor.fetchone()
        if row is None:
            raise UnknownRecipient(f"recipient {recipient} is not in {self.place.recipients_table}; "
                                  f"`incsync onboard create {recipient} ...` creates it")
        return dict(zip([c.name for c in cursor.description or []], row, strict=True))

    def create(self, recipient: str, *, id_in_provider_system: str, products: list[str] | None = None,
               tier: str | None = None, actor: str) -> RecipientState:
        """A recipient row, disabled until its destination is submitted (its destination is named after it)."""
        if not ID_RE.match(recipient):
            raise OnboardingError(f'"{recipient}" cannot be a recipient id: use letters, digits, _ and -')
        self._checked(products, tier)
        if recipient in {r.id for r in self.config.recipients}:
            raise OnboardingError(f"recipient {recipient} already exists; `incsync onboard attach` changes it")
        with self.store.connect() as conn:
            cols = self.store.columns(conn, self.place.recipients_table)
            values: dict[str, Any] = {"id": recipient, "id_in_provider_system": id_in_provider_system,
                                      "destination": recipient, "enabled": False}
            if tier is not None or "tags" in cols:
                values["tags"] = column_value(cols.get("tags", "jsonb"), {TIER_TAG: tier} if tier else {})
            if products is not None:
                values["products"] = column_value(cols.get("products", "jsonb"), products)
            missing = [c for c in values if c not in cols]
            if missing:
                raise OnboardingError(f"{self.place.recipients_table} lacks the column(s) {', '.join(missing)}; add them "
                                      "(docs/onboarding.md shows the table)")
            found = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE id = %s").format(ident(self.place.recipients_table)),
                                 [recipient]).fetchone()
            if found:
                raise OnboardingError(f"recipient {recipient} already exists; `incsync onboard attach` changes it")
            conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                ident(self.place.recipients_table), sql.SQL(", ").join(map(sql.Identifier, values)),
                sql.SQL(", ").join([sql.Placeholder()] * len(values))), list(values.values()))
            audit(conn, self.place, actor=actor, action="create", recipient=recipient,
                  detail={"id_in_provider_system": id_in_provider_system, "products": products, "tier": tier})
        return self.status(recipient)

    def attach(self, recipient: str, *, products: list[str] | None, tier: str | None, actor: str) -> RecipientState:
        """Set the recipient's products and (when given) its tier."""
        self._checked(products, tier)
        with self.store.connect() as conn:
            row = self._row(conn, recipient)
            cols = self.store.columns(conn, self.place.recipients_table)
            values: dict[str, Any] = {}
            if products is not None:
                values["products"] = column_value(cols.get("products", "jsonb"), products)
            if tier is not None:
                tags = dict(_mapping(row.get("tags")) or {})
                tags[TIER_TAG] = tier
                values["tags"] = column_value(cols.get("tags", "jsonb"), tags)
            if not values:
                raise OnboardingError("nothing to attach: give --products and/or --tier")
            missing = [c for c in values if c not in cols]
            if missing:
                raise OnboardingError(f"{self.place.recipients_table} lacks the column(s) {', '.join(missing)}")
            conn.execute(sql.SQL("UPDATE {} SET {} WHERE id = %s").format(
                ident(self.place.recipients_table),
                sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in values)),
                [*values.values(), recipient])
            audit(conn, self.place, actor=actor, action="attach", recipient=recipient,
                  detail={"products": products, "tier": tier})
        return self.status(recipient)

    def link(self, recipient: str, *, actor: str) -> Issued:
        """A new link for ``recipient`` (its earlier links revoked); the token is in the result only."""
        with self.store.connect() as conn:
            self._row(conn, recipient)
            issued, revoked = links.issue(conn, self.place, recipient, by=actor, now=now_utc())
            audit(conn, self.place, actor=actor, action="link", recipient=recipient,
                  detail={"link": issued.link.id, "expires_at": issued.link.expires_at.isoformat(), "revoked": revoked})
        return issued

    def revoke(self, recipient: str, *, actor: str) -> list[str]:
        with self.store.connect() as conn:
            self._row(conn, recipient)
            revoked = links.revoke(conn, self.place, recipient, now=now_utc())
            if not revoked:
                raise OnboardingError(f"recipient {recipient} holds no unrevoked link; `incsync onboard link "
                                      f"{recipient}` issues one")
            audit(conn, self.place, actor=actor, action="revoke", recipient=recipient, detail={"links": revoked})
        return revoked

    def states(self, recipient: str | None = None) -> list[RecipientState]:
        """Each recipient of the table (or only ``recipient``) with its connection state."""
        with self.store.connect() as conn:
            cursor = conn.execute(sql.SQL("SELECT * FROM {} WHERE %s::text IS NULL OR id = %s ORDER BY id").format(
                ident(self.place.recipients_table)), [recipient, recipient])
            names = [c.name for c in cursor.description or []]
            rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
            kinds = dict(conn.execute(sql.SQL("SELECT name, kind FROM {}").format(
                ident(self.place.destinations_table))).fetchall())
            by_recipient: dict[str, Link] = {}
            for link in links.links_of(conn, self.place, recipient):
                by_recipient[link.recipient] = link  # the newest, in created order
        now = now_utc()
        out = []
        for row in rows:
            rid, destination = str(row["id"]), row.get("destination")
            connected = destination in kinds
            enabled = bool(row.get("enabled", True))
            newest = by_recipient.get(rid)
            out.append(RecipientState(
                id=rid, id_in_provider_system=str(row["id_in_provider_system"]),
                state="connected" if connected and enabled else "disabled" if connected else "awaiting destination",
                destination=destination if connected else None, kind=kinds.get(destination),
                products=_list(row.get("products")), tier=(_mapping(row.get("tags")) or {}).get(TIER_TAG),
                link=newest.state(now) if newest else "none",
                link_expires_at=newest.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if newest else None))
        return out

    def status(self, recipient: str) -> RecipientState:
        found = self.states(recipient)
        if not found:
            raise UnknownRecipient(f"recipient {recipient} is not in {self.place.recipients_table}; "
                                  f"`incsync onboard create {recipient} ...` creates it")
        return found[0]

    def audit_rows(self, recipient: str | None = None, *, limit: int = 200) -> list[AuditRow]:
        with self.store.connect() as conn:
            rows = conn.execute(sql.SQL("SELECT at, actor, action, recipient, detail FROM {} WHERE %s::text IS NULL "
                                        "OR recipient = %s ORDER BY id DESC LIMIT %s").format(
                ident(self.place.audit_table)), [recipient, recipient, limit]).fetchall()
        return [AuditRow(*row) for row in reversed(rows)]


def _mapping(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        import json

        value = json.loads(value)
    return value if isinstance(value, dict) else None


def _list(value: Any) -> list[str] | None:
    if isinstance(value, str):
        import json

        value = json.loads(value)
    return [str(v) for v in value] if isinstance(value, list) else None

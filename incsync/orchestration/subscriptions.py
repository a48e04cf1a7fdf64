"""What the recipient sensor remembers between ticks and what it launches when a recipient's products or
tier change: per model, the registered recipients that do not receive it, and each tier's recipients.

That state (tens of kilobytes at 10,000 recipients) lives in the instance's key-value table, written only
when it changes; the sensor's cursor is its digest, which Dagster commits with the tick's runs. The table
keeps the states of the last two digests: when a tick fails after storing its state, Dagster keeps the old
cursor, and the next tick still finds the state that cursor names.

- A recipient that starts receiving a model gets the model's initial backfill; one that stops is logged
  with how to drop the copy it keeps.
- A recipient that moves to another tier gets one catch-up run per model it receives, covering what its
  old tier's next tick would have: the windows since that tier's previous tick. Without it, a move to a
  faster tier would skip the windows that closed since the slower tier last ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.config.products import kept_copy, product_models, receives, tier_cron, tier_of
from incsync.config.tags import INCREMENTAL
from incsync.core import cron
from incsync.core.bounds import UTC
from incsync.core.windows import tick_span, window_key_for
from incsync.operations.dagster_compat import read_instance_value, write_instance_value
from incsync.operations.launch import run_specs

STATE_KEY = "incsync/recipients_sensor/registry"


@dataclass(frozen=True)
class Registry:
    """The sensor's state: per model the recipients not receiving it; each tiered recipient's tier (None:
    never recorded, so no move can be told)."""

    unsubscribed: dict[str, set[str]]
    tiers: dict[str, str] | None

    @classmethod
    def load(cls, instance: dg.DagsterInstance, cursor: str | None) -> Registry:
        """The state the cursor (a digest) names; nothing known when there is none (a first tick)."""
        if not cursor:
            return cls({}, None)
        stored = json.loads(read_instance_value(instance, STATE_KEY) or "{}")
        for slot in ("current", "previous"):
            if (stored.get(slot) or {}).get("digest") == cursor:
                return cls.parse(stored[slot]["registry"])
        return cls({}, None)

    def save(self, instance: dg.DagsterInstance, cursor: str | None) -> str:
        """Store this state (when it changed) and return the cursor that names it."""
        text = self.text()
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        if digest != cursor:
            stored = json.loads(read_instance_value(instance, STATE_KEY) or "{}")
            previous = next((stored[s] for s in ("current", "previous")
                             if cursor and (stored.get(s) or {}).get("digest") == cursor), None)
            write_instance_value(instance, STATE_KEY, json.dumps(
                {"current": {"digest": digest, "registry": text}, "previous": previous}))
        return digest

    @classmethod
    def parse(cls, text: str) -> Registry:
        doc = json.loads(text)
        tiers = doc.get("tiers")
        return cls(
            {m: set(ids) for m, ids in doc.get("unsubscribed", {}).items()},
            None if tiers is None else {rid: tier for tier, ids in tiers.items() for rid in ids},
        )

    @classmethod
    def now(cls, config: IncsyncConfig, models: Sequence[ModelConfig], enabled: Sequence[RecipientConfig]) -> Registry:
        held = product_models(config)
        unsubscribed = {} if not config.products else {
            m.model_name: {r.id for r in enabled if not receives(config, r, m.model_name, held=held)} for m in models}
        tiers = {r.id: t.name for r in enabled if (t := tier_of(config, r)) is not None} if config.tiers else {}
        return cls(unsubscribed, tiers)

    def text(self) -> str:
        by_tier: dict[str, list[str]] = {}
        for rid, tier in sorted((self.tiers or {}).items()):
            by_tier.setdefault(tier, []).append(rid)
        return json.dumps({"unsubscribed": {m: sorted(ids) for m, ids in self.unsubscribed.items() if ids},
                           "tiers": by_tier}, sort_keys=True)


def subscription_changes(
    before: Registry, now: Registry, registered: set[str]
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per model, the registered recipients that started receiving it, and those that stopped."""
    models = set(before.unsubscribed) | set(now.unsubscribed)
    started = {m: (before.unsubscribed.get(m, set()) - now.unsubscribed.get(m, set())) & registered for m in models}
    stopped = {m: (now.unsubscribed.get(m, set()) - before.unsubscribed.get(m, set())) & registered for m in models}
    return {m: ids for m, ids in started.items() if ids}, {m: ids for m, ids in stopped.items() if ids}


def tier_moves(before: Registry, now: Registry, registered: set[str]) -> dict[str, str | None]:
    """Registered recipients whose tier changed since the last tick -> their old tier (None: none)."""
    if before.tiers is None:
        return {}
    old, new = before.tiers, now.tiers or {}
    return {rid: old.get(rid) for rid in (set(old) | set(new)) & registered if old.get(rid) != new.get(rid)}


def catch_up_requests(
    config: IncsyncConfig, models: Sequence[ModelConfig], moved: dict[str, str | None], now: datetime, *,
    registered: Sequence[str],
) -> list[dg.RunRequest]:
    """Per model, a run per moved recipient group over the windows since its old tier's previous tick."""
    tiers = {t.name: t for t in config.tiers}
    held = product_models(config)
    requests = []
    for model in models:
        windows: dict[str, tuple[str, str]] = {}
        for rid in (r for r in registered if r in moved):
            recipient = config.recipient(rid)
            if not recipient.enabled or not receives(config, recipient, model.model_name, held=held):
                continue
            old = tiers.get(moved[rid] or "")
            frequency = (tier_cron(old, model.model_name) if old is not None else None) or model.frequency
            span = tick_span(model, previous_tick=cron.previous_tick(frequency, now).astimezone(UTC), tick=now)
            if span is not None:
                windows[rid] = (window_key_for(model, span[0]), window_key_for(model, span[1]))
        recipients = [config.recipient(rid) for rid in windows]
        specs = run_specs(config, model, recipients, windows=windows, registered=registered, mode=INCREMENTAL,
                          run_key_prefix=f"tier:{now.isoformat()}")
        requests += [spec.run_request() for spec in specs]
    return requests


def grouping(config: IncsyncConfig, recipient: RecipientConfig) -> tuple[str, tuple[str, ...]]:
    """Tier, then products: recipients scheduled together sort together (a stable sort keeps the file's order)."""
    tier = tier_of(config, recipient)
    return (tier.name if tier is not None else "", tuple(sorted(recipient.products or ())))


def log_unsubscribed(context: dg.SensorEvaluationContext, config: IncsyncConfig, stopped: dict[str, set[str]]) -> None:
    for model, ids in sorted(stopped.items()):
        for rid in sorted(ids)[:20]:
            context.log.warning(kept_copy(config, config.recipient(rid), model))
        if len(ids) > 20:
            context.log.warning("... and %s more recipients no longer receive model %s", len(ids) - 20, model)

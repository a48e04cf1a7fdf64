"""Products and schedule tiers: which models a recipient receives, and on which cron.

A product is a named set of models; a recipient lists its ``products`` (none listed: every model, as
before products existed). A tier is a named schedule: a recipient is in the tier its ``tier`` tag names
(``tags: {tier: gold}``), and the tier's cron replaces the model's ``frequency`` for it. Without a
``tiers`` section a ``tier`` tag is an ordinary tag. The checks of both sections are here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from incsync.config.base import ID_RE, StrictModel, listed_names

if TYPE_CHECKING:
    from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig

TIER_TAG = "tier"
TIER_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")  # it names a Dagster schedule, which allows no "-"


class ProductConfig(StrictModel):
    """A named set of models that recipients subscribe to."""

    name: str = Field(description="Product name (letters, digits, _ and -), listed in a recipient's `products`.")
    models: list[str] = Field(description="The models (`model_name`) a subscriber receives.")
    description: str | None = Field(default=None, description="What the product is, for people.")


class TierConfig(StrictModel):
    """A schedule tier: its recipients are transferred on the tier's cron instead of the model's `frequency`."""

    name: str = Field(description="Tier name (letters, digits and _); a recipient joins it with the tag `tier: <name>`.")
    frequency: str | None = Field(
        default=None,
        description="Cron (UTC) of every model for the tier's recipients; unset: the model's own `frequency`.",
    )
    models: dict[str, str] = Field(
        default_factory=dict,
        description="model_name -> cron (UTC): a model's own cron in this tier, overriding `frequency`.",
    )


def receives(
    config: IncsyncConfig, recipient: RecipientConfig, model: str, *, held: dict[str, frozenset[str]] | None = None
) -> bool:
    """Whether ``recipient`` receives ``model``: one of its products holds it, or it lists none.
    ``held``: ``product_models(config)``, computed once by a caller asking for many recipients."""
    if recipient.products is None:
        return True
    held = product_models(config) if held is None else held
    return any(model in held.get(p, ()) for p in recipient.products)


def subscribers(config: IncsyncConfig, model: str, recipients: Sequence[RecipientConfig] | None = None) -> list[RecipientConfig]:
    """Of ``recipients`` (default: the enabled ones), those receiving ``model``, in their order."""
    pool = [r for r in config.recipients if r.enabled] if recipients is None else recipients
    held = product_models(config)
    return [r for r in pool if receives(config, r, model, held=held)]


def product_models(config: IncsyncConfig) -> dict[str, frozenset[str]]:
    """Product name -> the models it holds."""
    return {p.name: frozenset(p.models) for p in config.products}


def products_with(config: IncsyncConfig, model: str) -> list[str]:
    """The products holding ``model``, in the file's order."""
    return [p.name for p in config.products if model in p.models]


def not_received(config: IncsyncConfig, recipient: RecipientConfig, model: str) -> str:
    """Why ``recipient`` does not receive ``model``, and the fix: the product(s) to add."""
    holding = products_with(config, model)
    fix = (f"add product {' or '.join(holding)} to its products" if holding
           else f"no product holds {model}: add it to a product's models, then that product to the recipient's products")
    return (f"recipient {recipient.id} does not receive model {model}: its products [{', '.join(recipient.products or [])}] "
            f"do not hold it; {fix}")


def product_filter(config: IncsyncConfig, product: str) -> Callable[[Sequence[str], Sequence[str]], bool]:
    """Whether a run (its model names, its recipient ids) belongs to ``product``: one of its models for one of
    the recipients receiving them (a recipient without ``products`` receives every model)."""
    found = next((p for p in config.products if p.name == product), None)
    if found is None:
        from incsync.errors import InputError

        known = ", ".join(p.name for p in config.products) or "none: the file has no products section"
        raise InputError(f'unknown product "{product}"; known: {known}')
    members = {r.id for r in config.recipients if r.products is None or product in r.products}
    return lambda models, recipients: any(m in found.models for m in models) and any(r in members for r in recipients)


def tier_of(config: IncsyncConfig, recipient: RecipientConfig) -> TierConfig | None:
    """The tier the recipient's ``tier`` tag names (None: no tier, or no ``tiers`` section)."""
    name = recipient.tags.get(TIER_TAG)
    if name is None or not config.tiers:
        return None
    return next((t for t in config.tiers if t.name == name), None)


def tier_cron(tier: TierConfig, model: str) -> str | None:
    """The tier's cron for ``model`` (None: the tier leaves this model on its own frequency)."""
    return tier.models.get(model, tier.frequency)


def schedule_tier(config: IncsyncConfig, recipient: RecipientConfig, model: str) -> str | None:
    """The name of the tier whose schedule transfers ``model`` to ``recipient`` (None: the model's own)."""
    tier = tier_of(config, recipient)
    return tier.name if tier is not None and tier_cron(tier, model) is not None else None


def frequency_of(config: IncsyncConfig, recipient: RecipientConfig, model: ModelConfig) -> str:
    """The cron on which ``model`` reaches ``recipient``: its tier's, else the model's ``frequency``."""
    tier = tier_of(config, recipient)
    return (tier_cron(tier, model.model_name) if tier is not None else None) or model.frequency


def model_schedules(config: IncsyncConfig, model: ModelConfig) -> list[tuple[str | None, str]]:
    """(tier name, cron) of each schedule ``model`` needs: its own (tier None), then one per tier with a cron for it."""
    tiers = [(t.name, cron) for t in config.tiers if (cron := tier_cron(t, model.model_name)) is not None]
    return [(None, model.frequency), *tiers]


def kept_copy(config: IncsyncConfig, recipient: RecipientConfig, model: str) -> str:
    """What happens to the copy of a recipient that stopped receiving ``model``, and how to drop it."""
    destination = config.destination(recipient.destination)
    how, kind = destination.drop_hint(model, recipient.id), destination.kind
    return (f"recipient {recipient.id} no longer receives model {model}: incsync stops transferring it and keeps its "
            f"copy in destination {destination.name} ({kind}); to drop the copy, {how} (subscribing again re-syncs it "
            "from the start)")


def product_problems(cfg: IncsyncConfig) -> list[str]:
    """Unknown models in products and tiers, unknown products on recipients, unknown tiers in tags, bad crons."""
    from incsync.core.cron import is_valid_cron

    problems: list[str] = []
    models = [m.model_name for m in cfg.models]
    known_models, shown_models = set(models), listed_names(models)
    for section, names, rule in (("products", [p.name for p in cfg.products], ID_RE),
                                 ("tiers", [t.name for t in cfg.tiers], TIER_NAME_RE)):
        seen: set[str] = set()
        for i, name in enumerate(names):
            if not rule.match(name):
                problems.append(f'{section}[{i}].name: "{name}" must match {rule.pattern}')
            if name in seen:
                problems.append(f'{section}[{i}]: duplicate name "{name}"; names must be unique')
            seen.add(name)
    for i, p in enumerate(cfg.products):
        for model in p.models:
            if model not in known_models:
                problems.append(f'products[{i}].models: model "{model}" of product {p.name} is not a configured model; '
                                f"known: [{shown_models}]; fix its spelling or add the model under models:")
    for i, t in enumerate(cfg.tiers):
        for where, cron in ((f"tiers[{i}].frequency", t.frequency), *((f"tiers[{i}].models.{m}", c) for m, c in t.models.items())):
            if cron is not None and not is_valid_cron(cron):
                problems.append(f'{where}: "{cron}" is not a cron expression (e.g. "*/15 * * * *")')
        for model in t.models:
            if model not in known_models:
                problems.append(f'tiers[{i}].models: model "{model}" of tier {t.name} is not a configured model; '
                                f"known: [{shown_models}]; fix its spelling or remove it")
    products = [p.name for p in cfg.products]
    known_products, shown_products = set(products), listed_names(products)
    tiers = {t.name for t in cfg.tiers}
    shown_tiers = listed_names([t.name for t in cfg.tiers])
    for i, r in enumerate(cfg.recipients):
        for name in r.products or ():
            if name not in known_products:
                problems.append(f'recipients[{i}].products: product "{name}" of recipient {r.id} is not a configured '
                                f"product; known: [{shown_products}]; fix its spelling or add it under products:")
        if tiers and (name := r.tags.get(TIER_TAG)) is not None and name not in tiers:
            problems.append(f'recipients[{i}].tags.tier: tier "{name}" of recipient {r.id} is not a configured tier; '
                            f"known: [{shown_tiers}]; fix its spelling or add it under tiers:")
    return problems

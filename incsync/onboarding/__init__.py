"""Onboarding: recipients connecting their own destinations (docs/onboarding.md).

The provider creates a recipient (a row of the ``recipients_from`` table), attaches products and a tier and
issues a link (``place``, ``links``, ``service``; the CLI ``incsync onboard`` and the JSON API ``api``); the
recipient opens it on ``incsync serve``, fills a form generated from the destination models (``forms``), tests
the connection and submits (``page``, guarded by ``guard``): a destinations table row and a vault entry. Every
change is an audit row, never with a secret.

May import ``config``, ``secrets``, ``destinations``, ``operations`` and ``incsync.errors``.
"""

"""Secrets opened where a connection is made: the secret store interface (``stores``) with its two stores,
environment variables and incsync's vault, a table of entries sealed with AES-GCM under keys from one
environment variable or file (``keys``, ``vault``), rotated without downtime (docs/secrets.md).

May import ``core``, ``storage``, ``config`` and ``incsync.errors``.
"""

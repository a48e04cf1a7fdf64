"""`incsync serve`: each recipient's copy served over the Delta Sharing protocol and a read-only Iceberg REST
catalog (``iceberg/``), with its own token.

Owns the share catalog (which tables a recipient's share holds, found through the destination contract),
the token store (hashed bearer tokens, rotation, revocation), signed file URLs, reading Delta tables'
logs and Iceberg tables' metadata for the protocols, and the HTTP server. May import ``core``, ``storage``,
``config`` and ``destinations`` (their contract, never a kind's module); never Dagster, ``operations`` or
``orchestration``.
"""

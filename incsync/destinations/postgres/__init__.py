"""A PostgreSQL schema: COPY into a stage table, then one transaction that adapts the live table,
upserts and records the transfer in ``_incsync_transfers``.
"""

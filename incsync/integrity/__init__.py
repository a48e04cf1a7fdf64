"""Verify a recipient's copy against its source by hashed buckets of the key space, the aggregation
pushed into each engine, comparing row by row only the buckets that differ.

May import ``core``, ``config``, ``sources``, ``staging``, ``destinations`` and ``incsync.errors``.
"""

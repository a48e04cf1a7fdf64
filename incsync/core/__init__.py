"""Pure values of a transfer: windows, bounds, watermarks, the safe horizon, fingerprints, transfer
ids, SQL identifiers and literals per vendor, type maps and schema diffs, the canonical text of values.

No I/O, no Spark, no Dagster: everything here is tested with plain values. May import only
``incsync.errors`` and the standard library (``config`` models appear in annotations only).
"""

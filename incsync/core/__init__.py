"""Pure values of a transfer: windows, bounds, watermarks, the safe horizon, fingerprints, transfer
ids, SQL identifiers and literals per vendor, type maps and schema diffs, the canonical text of values.

No I/O, no Spark, no Dagster: everything here is tested with plain values. Of incsync it imports only
``incsync.errors``, not even for typing: the few fields it reads of a model, a recipient or a staged
batch are ``Protocol``s beside the functions that read them, which the config models and the staging
satisfy as they are.
"""

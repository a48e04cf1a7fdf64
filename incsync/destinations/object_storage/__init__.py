"""Parquet files and manifests under a prefix: files moved into place, the manifest written last,
signed if asked; the transfer log, the reader of committed manifests and the janitor.
"""

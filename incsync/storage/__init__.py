"""One filesystem layer for every path incsync reads or writes: local folders, ``file://`` and object
stores (``s3://``, ``gs://``, ``abfss://``), their names and ``storage_options``, and local file locks.

May import ``core`` and ``incsync.errors``.
"""

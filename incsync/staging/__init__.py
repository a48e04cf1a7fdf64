"""The staged batch: Parquet files private to one transfer, written once from Spark or Arrow, in the
faithful types of ``core.typemap``; and the staging folder's claim and cleanup.

May import ``core``, ``config``, ``storage`` and ``incsync.errors``.
"""

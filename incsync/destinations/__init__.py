"""Destinations by kind behind one protocol (``base.Destination``: read state, publish a staged batch
with its transfer record, reset): ``delta/``, ``postgres/``, ``object_storage/``, ``duckdb/``, ``iceberg/`` and
``mariadb/``; the owner stamp
every publish checks; readers of a recipient's published copy.

May import ``core``, ``config``, ``storage``, ``staging`` and ``incsync.errors``.
"""

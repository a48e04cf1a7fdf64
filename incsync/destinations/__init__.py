"""Destinations by kind behind one protocol (``base.Destination``: read state, publish a staged batch
with its transfer record, where a reader finds the copy, its rows and schema), one sub-package per kind
named as the file's ``kind`` and listed in ``registry``; the owner stamp every publish checks; readers of a
recipient's published copy.

May import ``core``, ``config``, ``storage``, ``staging`` and ``incsync.errors``.
"""

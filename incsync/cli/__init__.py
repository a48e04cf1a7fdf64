"""The ``incsync`` command: its parser and entry point, one module per command family, and how it talks
(one-line errors, JSON, progress).

The top of the house: may import every package. Imports at module level stay light (standard
library, ``incsync.errors``, ``incsync.paths``) so ``incsync transfer --worker`` starts fast.
"""

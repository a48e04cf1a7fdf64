"""Sources by vendor behind one protocol (``base.Source``): databases over Spark JDBC (``jdbc/``) and
lake folders or catalog tables (``lake``), each reading one recipient's rows within bounds, pushed down.

May import ``core``, ``config``, ``storage``, ``spark`` and ``incsync.errors``.
"""

"""The Spark session: its settings (defaults, the OS's JDBC driver jars, the file's overrides), where
its driver lives relative to a cluster, a warm-up thread, and a local Spark Connect server.

May import ``core`` and ``incsync.errors``; never ``config`` (which checks Spark settings through it).
"""

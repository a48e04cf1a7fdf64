"""A resident ``incsync worker`` that keeps Python, Dagster and Spark warm, and its thin client
(standard library only) that ``incsync transfer --worker`` uses.

May import ``orchestration`` and everything below it.
"""

"""The transfer engine: a run's (window, recipient) partitions planned into spans, each prepared
(state, bounds), extracted and staged once, validated and published batch by batch, with deletes,
repair, retries, progress and the dry run.

May import every engine package below it (``core``, ``config``, ``storage``, ``spark``, ``sources``,
``staging``, ``destinations``, ``integrity``); never Dagster, ``operations`` or ``orchestration``.
"""

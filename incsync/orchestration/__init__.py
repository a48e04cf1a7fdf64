"""incsync in Dagster: the Definitions, one asset per model partitioned by window × recipient, the IO
manager that publishes, resources, materialization metadata, the integrity asset check, the recipient
sensor and schedules, run launch and run statuses, transfer slots, maintenance, the transfer log
(``audit``), and the one module of Dagster's private APIs (``dagster_compat``).

The only package that imports Dagster (with ``cli`` and ``worker``, which launch runs); may import
every engine package.
"""

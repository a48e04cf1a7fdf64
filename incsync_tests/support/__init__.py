"""Helpers that tests in several folders share; fixtures stay in the conftest files, which nothing imports.

``lake`` (lake tables, lake configs, Dagster materializations), ``host`` (CI, free ports), ``jdbc`` (a
PostgreSQL or MariaDB database per test), ``destinations`` (one spec per destination kind, an Arrow
source), ``arrow_transfer`` and ``jdbc_transfer`` (one transfer without Dagster), ``integrity``,
``schema_change``, ``s3`` (a moto server), ``webhook``, ``browser``, ``config_scale``.
"""

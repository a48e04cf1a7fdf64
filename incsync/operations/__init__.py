"""Operations on Dagster runs and the instance: launching transfers (``launch``, ``runs``), their statuses,
blame and liveness, the run's transfer slots, what a run reports of its partitions (``reporting``,
``metadata``, ``partitions``: a model's asset key and partition keys), the transfer log (``audit``,
``audit_rows``), destination maintenance, the instance and its dagster.yaml (``instance``,
``concurrency``), and the one module of Dagster's private APIs (``dagster_compat``).

Imports Dagster (it operates on Dagster runs and instances) but defines nothing Dagster loads: the
assets, IO manager, resources, sensors, schedules, checks and jobs are ``orchestration``'s, which builds
them on these operations. May import every engine package (``core`` .. ``sharing``); never
``orchestration``, ``worker`` or ``cli``.
"""

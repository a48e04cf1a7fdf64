"""incsync in Dagster: what a code location loads. The Definitions, one asset per model partitioned by
window × recipient, the IO manager that publishes, resources, the integrity asset check, the recipient
sensor and its subscriptions, the schedules, the reaper and failure-alert sensors, and incsync's own jobs
(maintenance, the transfer log); the same Definitions as a Dagster component another project adds
(``component.IncsyncComponent``, exported as ``incsync.IncsyncComponent``).

Each is built on ``operations`` (launch, statuses, blame, liveness, slots, reporting, the transfer log's
pass, maintenance's pass); building the Definitions changes no process-wide state. May import
``operations`` and every engine package; never ``worker`` or ``cli``.
"""

"""The configuration file: its pydantic model (sources, destinations, models, recipients), loading it
(YAML, environment, the recipients table), the checks across fields, where each problem is in the
file, the generated reference (docs/config.md), and the run tags users may set.

May import ``core``, ``storage``, ``spark`` and ``incsync.errors``.
"""

"""The one Definitions object, built from the file named by $INCSYNC_CONFIG (default incsync.yaml).

Importing this module reads the file only: no JVM, no database connection. Code that builds
definitions for another file uses `incsync.orchestration.definitions.build_definitions`. With neither $INCSYNC_CONFIG
nor an incsync.yaml in the working directory (`dagster dev` in a fresh clone), it loads the shipped
example, examples/lake-to-delta/incsync.yaml, and says so.
"""

from incsync.orchestration.definitions import build_definitions, config_for_code_location

defs = build_definitions(config_for_code_location())

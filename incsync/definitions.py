"""The one Definitions object, built from the file named by $INCSYNC_CONFIG (default incsync.yaml).

Importing this module reads the file only: no JVM, no database connection. Code that builds
definitions for another file uses `incsync.project.build_definitions`.
"""

from incsync.project import build_definitions

defs = build_definitions()

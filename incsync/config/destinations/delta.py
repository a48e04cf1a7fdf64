"""`kind: delta`: one Delta Lake table per model under a folder or storage URL."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from incsync.config.destinations.base import CONCURRENCY_HELP, NAME_HELP, STORAGE_OPTIONS_HELP, Placed


class DeltaDestinationConfig(Placed):
    """One Delta Lake table per model under ``path`` (``<path>/<model>``)."""

    name: str = Field(description=NAME_HELP)
    kind: Literal["delta"] = Field(description="`delta`.")
    path: str = Field(
        description="Folder (or storage URL) of the recipient's tables; relative paths are relative to the file.",
    )
    storage_options: dict[str, str] = Field(default_factory=dict, description=STORAGE_OPTIONS_HELP)
    max_concurrent_transfers: int = Field(default=1, ge=1, description=CONCURRENCY_HELP)
    target_file_size: int = Field(
        default=4 << 20, ge=1 << 16,
        description="Bytes per data file (delta.targetFileSize), set when the table is created: many files let "
        "a MERGE rewrite only those holding changed keys.",
    )
    retention_hours: int = Field(
        default=168, ge=0,
        description="`incsync maintain` keeps the files an older table version still reads for this long after a "
        "later commit replaced them (Delta's default, 7 days): a reader of any version younger than that never "
        "fails; files older than that are deleted (vacuum).",
    )
    change_data_feed: bool = Field(
        default=False,
        description="Keep Delta's change data feed (`delta.enableChangeDataFeed`), set when a table is created: "
        "share readers can then read the rows changed between two versions (docs/sharing.md), for a "
        "`_change_data` file per MERGE.",
    )

    clusters_files: ClassVar[bool] = True  # destinations/delta/cluster.py
    served_by_sharing: ClassVar[bool] = True
    starter: ClassVar[str] = """\
  - name: acme_delta
    kind: delta
    path: ./out/acme          # one Delta table per model: ./out/acme/orders (created by the first transfer)
"""

    def drop_hint(self, model: str, recipient: str) -> str:
        return f"delete the Delta table folder {self.path.rstrip('/')}/{model}"

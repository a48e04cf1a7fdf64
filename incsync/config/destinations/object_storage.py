"""`kind: object_storage`: Parquet files and manifests under a prefix that recipients may share."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from incsync.config.destinations.base import CONCURRENCY_HELP, NAME_HELP, STORAGE_OPTIONS_HELP, Placed


class ObjectStorageDestinationConfig(Placed):
    """Parquet files plus manifests under a prefix."""

    name: str = Field(description=NAME_HELP)
    kind: Literal["object_storage"] = Field(description="`object_storage`.")
    path: str = Field(
        description="Prefix (folder or storage URL) of the Parquet files and manifests; may be shared by recipients.",
    )
    disable_manifest: bool = Field(
        default=False,
        description="Write no manifests (readers then cannot tell committed files from others).",
    )
    storage_options: dict[str, str] = Field(default_factory=dict, description=STORAGE_OPTIONS_HELP)
    signing_key_env: str | None = Field(
        default=None,
        description="Name of the variable holding the path of an Ed25519 PEM private key: manifests then carry "
        "`signature` and `signature_public_key` (read_manifested(public_key=...) verifies them).",
    )
    max_concurrent_transfers: int = Field(default=1, ge=1, description=CONCURRENCY_HELP)
    target_file_size: int = Field(
        default=128 << 20, ge=1 << 16,
        description="Bytes per data file of the snapshot `incsync maintain` writes of each recipient's live rows.",
    )
    retention_hours: int = Field(
        default=168, ge=0,
        description="`incsync maintain` keeps the manifests and files a snapshot (or full refresh) superseded for "
        "this long after it (Delta's default, 7 days): a reader that listed the manifests before it never fails; "
        "older ones are deleted (vacuum).",
    )

    shares_location: ClassVar[bool] = True  # one prefix, keys per recipient
    starter: ClassVar[str] = """\
  - name: files
    kind: object_storage
    path: ./out/files         # Parquet files + manifests; recipients may share it (one folder each)
"""

    def drop_hint(self, model: str, recipient: str) -> str:
        root = self.path.rstrip("/")
        return (f"delete {root}/{model}/recipient={recipient}/ and the manifests of recipient {recipient} under "
                f"{root}/_manifests/{model}/")

"""What one maintenance pass did to one destination table (or prefix), for the CLI, the job and the docs."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from incsync.storage.files import open_store


@dataclass(frozen=True)
class Maintained:
    """One table's maintenance: ``skipped`` says why nothing was done (then the counts are zero)."""

    destination: str
    table: str
    files_before: int = 0
    files_after: int = 0
    files_compacted: int = 0  # files rewritten into fewer (dry run: those a pass would rewrite)
    files_vacuumed: int = 0  # files deleted from storage: no version inside the retention reads them
    bytes_live: int = 0  # what the current version reads
    bytes_stored_before: int = 0  # data files in the folder, live or not, before the pass
    bytes_stored_after: int = 0
    checkpoint_version: int | None = None
    skipped: str | None = None
    dry_run: bool = False

    def line(self) -> str:
        if self.skipped:
            return f"{self.destination} {self.table}: skipped: {self.skipped}"
        if self.dry_run:
            return (f"{self.destination} {self.table}: {self.files_compacted} file(s) to compact, "
                    f"{self.files_vacuumed} file(s) to vacuum; {size_text(self.bytes_stored_before)} stored for "
                    f"{size_text(self.bytes_live)} live (dry run)")
        return (f"{self.destination} {self.table}: files {self.files_before} -> {self.files_after} "
                f"({self.files_compacted} compacted), {self.files_vacuumed} vacuumed; stored "
                f"{size_text(self.bytes_stored_before)} -> {size_text(self.bytes_stored_after)} for {size_text(self.bytes_live)} live"
                + (f"; checkpoint at version {self.checkpoint_version}" if self.checkpoint_version is not None else ""))

    def metadata(self) -> dict[str, object]:
        return {k: v for k, v in vars(self).items() if v is not None}


def size_text(n: int) -> str:
    """Bytes as MB; under 1 MB as kB, so a small table's sizes do not all read 0.0 MB."""
    return f"{n / 1e6:.1f} MB" if abs(n) >= 1e6 else f"{n / 1e3:.1f} kB"


def stored_bytes(path: str, storage_options: dict[str, str] | None) -> int:
    """Bytes of the table's data files in storage (its ``_delta_log`` aside), live or not."""
    store = open_store(path, storage_options)
    total = 0
    for info in store.list(recursive=True):
        key = store.relative(info.path)
        if info.type == pafs.FileType.File and not key.startswith("_delta_log"):
            total += info.size or 0
    return total

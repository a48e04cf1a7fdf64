"""One filesystem layer for every path incsync reads or writes: local folders, ``file://`` and object
stores (``s3://`` / ``s3a://``, ``gs://``, ``abfss://``).

Built on ``pyarrow.fs``: pyarrow is already a dependency, ``pyarrow.dataset`` and ``pyarrow.parquet`` read
and write through it directly (lake scans with their filters pushed down, staged batches, data files),
and S3, GCS and Azure are built into the wheel, so no package is added. fsspec would need s3fs, gcsfs
and adlfs beside it; obstore shares delta-rs's option names and has conditional puts, but
``pyarrow.dataset`` reads through it only over an fsspec bridge.

Filesystems and ``storage_options`` (delta-rs's names, secrets through ``<option>_env``) are
``incsync.storage.filesystems``.

pyarrow.fs has no rename on object stores and no conditional put: a key that must appear whole is
written once, by one PUT, under a name no other writer uses (a manifest is named by its transfer id);
object stores make a PUT visible whole or not at all. Local folders write a temporary file and rename it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

from incsync.storage.filesystems import filesystem, resolve_options
from incsync.storage.names import is_url, local_path


@dataclass(frozen=True)
class Store:
    """A folder on a filesystem, addressed by ``/``-separated keys relative to it."""

    url: str
    fs: pafs.FileSystem = field(repr=False, compare=False)
    root: str

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, key: str = "") -> str:
        """The path of ``key`` on ``fs``."""
        return f"{self.root}/{key}".rstrip("/") if key else self.root

    def uri(self, key: str = "") -> str:
        """``key`` as the user would write it (a local path or a URL), for messages and delta-rs."""
        base = self.root if self.local else self.url.rstrip("/")
        return f"{base}/{key}".rstrip("/") if key else base

    def child(self, key: str) -> Store:
        return Store(url=self.uri(key), fs=self.fs, root=self.path(key))

    def info(self, key: str = "") -> pafs.FileInfo:
        return self.fs.get_file_info(self.path(key))

    def exists(self, key: str = "") -> bool:
        return self.info(key).type != pafs.FileType.NotFound

    def is_dir(self, key: str = "") -> bool:
        return self.info(key).type == pafs.FileType.Directory

    def read_bytes(self, key: str) -> bytes:
        """The object's bytes; FileNotFoundError when there is none."""
        try:
            with self.fs.open_input_stream(self.path(key)) as f:
                return f.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower() or "NoSuchKey" in str(exc):
                raise FileNotFoundError(self.uri(key)) from None
            raise

    def read_text(self, key: str) -> str:
        return self.read_bytes(key).decode()

    def write(self, key: str, data: bytes | str, *, once: bool = False) -> None:
        """Write ``key`` so a reader sees the old content or the whole new one, never a part.

        ``once``: the key must not exist yet (FileExistsError); see ``write_once``.
        """
        payload = data.encode() if isinstance(data, str) else data
        if not self.local:
            if once and self.exists(key):
                raise FileExistsError(self.uri(key))
            with self.fs.open_output_stream(self.path(key)) as f:  # one PUT: visible whole or not at all
                f.write(payload)
            return
        path = Path(self.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        try:
            if once:
                os.link(tmp, path)  # fails when the key exists: exclusive on a local disk
            else:
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def write_once(self, key: str, data: bytes | str) -> None:
        """Write a key no other writer uses (FileExistsError when it exists), visible whole or not at all.

        Exclusive on a local disk; on an object store a check before one PUT: the key's name (a
        transfer id) is what keeps writers apart.
        """
        self.write(key, data, once=True)

    def list(self, key: str = "", *, recursive: bool = False) -> list[pafs.FileInfo]:
        """What lies under ``key`` (nothing when it does not exist); ``relative`` turns a path into a key."""
        return self.fs.get_file_info(pafs.FileSelector(self.path(key), allow_not_found=True, recursive=recursive))

    def relative(self, path: str) -> str:
        return path[len(self.root) + 1:] if path.startswith(self.root + "/") else path

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(key))

    def delete_dir(self, key: str = "") -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.path(key))

    def mkdir(self, key: str = "") -> None:
        self.fs.create_dir(self.path(key), recursive=True)

    def put_file(self, source: pafs.FileSystem, source_path: str, key: str, *, move: bool = False) -> None:
        """Copy (or move) a file from ``source`` to ``key``: a rename when both are the same local disk."""
        target = self.path(key)
        if self.local and isinstance(source, pafs.LocalFileSystem):
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            (shutil.move if move else shutil.copyfile)(source_path, target)
            os.utime(target)  # a janitor's grace period counts from landing, not from staging
            return
        if not self.local and source.equals(self.fs):
            self.fs.copy_file(source_path, target)  # same store and credentials: a server-side copy
        else:
            with source.open_input_stream(source_path) as src, self.fs.open_output_stream(target) as dst:
                while chunk := src.read(8 << 20):
                    dst.write(chunk)
        if move:
            source.delete_file(source_path)

    def sha256(self, key: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open_input_stream(self.path(key)) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    def mtime(self, key: str) -> float:
        """Seconds since the epoch of the key's last write (object stores: its upload)."""
        stamp = self.info(key).mtime
        return stamp.timestamp() if stamp is not None else 0.0


def open_store(url: str | os.PathLike[str], options: Mapping[str, str] | None = None) -> Store:
    """The folder at ``url`` (a local path, ``file://`` or an object-store URL) with resolved ``options``."""
    fs, root = filesystem(str(url), options)
    return Store(url=str(url) if is_url(str(url)) else root, fs=fs, root=root)


def locks_folder() -> Path:
    """Where ``StoragePath.lock_file`` keeps its files: this host's temporary folder."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / "incsync-locks"


@dataclass(frozen=True)
class StoragePath:
    """A folder or file on an object store with the part of ``pathlib.Path``'s interface staging uses, so a
    staging root can be a local ``Path`` or a URL. Object stores have no empty folders: ``mkdir`` does nothing."""

    fs: pafs.FileSystem = field(repr=False, compare=False)
    path: str  # on ``fs``: bucket/key
    url: str

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, name: str) -> StoragePath:
        return StoragePath(self.fs, f"{self.path}/{name}", f"{self.url.rstrip('/')}/{name}")

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> StoragePath:
        return StoragePath(self.fs, self.path.rsplit("/", 1)[0], self.url.rsplit("/", 1)[0])

    def with_name(self, name: str) -> StoragePath:
        return self.parent / name

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        return None

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.fs.get_file_info(self.path).type == pafs.FileType.Directory

    def iterdir(self) -> list[StoragePath]:
        found = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return [self / f.base_name for f in found]

    def glob(self, pattern: str) -> list[StoragePath]:
        """Children whose name matches ``pattern`` (one level, as staging uses it)."""
        import fnmatch

        return [p for p in self.iterdir() if fnmatch.fnmatch(p.name, pattern)]

    def size(self) -> int:
        return self.fs.get_file_info(self.path).size or 0

    def rmtree(self) -> None:
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(self.path)

    def lock_file(self) -> Path:
        """A local file to lock while a transfer uses this folder (object stores have no locks)."""
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:24]
        folder = locks_folder()
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{self.name[:80]}-{digest}.lock"


def staging_root(url: str, options: Mapping[str, str] | None = None) -> Path | StoragePath:
    """The staging root: a local ``Path``, or a ``StoragePath`` on an object store (``options`` resolved here)."""
    if not is_url(url):
        return Path(local_path(url))
    fs, path = filesystem(url, resolve_options(options, "staging_storage_options"))
    return StoragePath(fs, path, url.rstrip("/"))

"""Whether a storage location can be reached: listed once with its options' credentials."""

from __future__ import annotations

from incsync.errors import ConfigError


def storage_problems(where: str, url: str, options: dict[str, str], *, key: str = ".path") -> list[str]:
    """One problem line when ``url`` cannot be listed (no bucket, refused credentials), else none."""
    import pyarrow.fs as pafs

    from incsync.storage.files import open_store
    from incsync.storage.filesystems import resolve_options

    option = "staging_storage_options" if not key else f"{where}.storage_options"
    try:
        store = open_store(url, resolve_options(options, f"{where}.storage_options"))
        bucket = store.root.split("/", 1)[0]
        if store.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            return [f"{where}{key}: {url}: bucket {bucket} does not exist (or {option} cannot see it); create it or fix the URL"]
        store.list()
    except ConfigError as exc:
        return exc.problems
    except OSError as exc:
        reason = " ".join(str(exc).split())[:300]
        return [f"{where}{key}: {url} cannot be listed ({reason}); check the URL, {option} and the credentials"]
    return []


def check_storage(where: str, url: str, options: dict[str, str]) -> None:
    """Raise ConfigError with the problem when ``url`` cannot be listed."""
    problems = storage_problems(where, url, options)
    if problems:
        raise ConfigError("destinations", problems)

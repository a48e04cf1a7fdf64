"""Reading a recipient's copy from its committed manifests: one schema, repairs and removals applied."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from incsync.core.schema_change import conform
from incsync.destinations.base import DELETED_AT
from incsync.destinations.object_storage.manifests import TransferLog, committed_manifests, open_prefix, schema_from_text
from incsync.storage.files import Store


def read_manifested(
    path: str | os.PathLike[str] | Store, model: str, recipient: str, *, private: bool = False,
    storage_options: Mapping[str, str] | None = None, public_key: str | bytes | None = None,
    version: int | None = None,
) -> pa.Table:
    """Exactly the rows of (model, recipient)'s committed transfers in one schema: the newest manifest's
    ``reader_schema`` (widened columns promoted, new columns NULL in older rows).

    ``path`` is a local folder, ``file://`` or an object-store URL; ``storage_options`` as in the config.
    ``public_key`` (Ed25519: raw, base64 or PEM): every manifest read must be signed by it and every file
    must have its signed sha256, else ``ManifestIntegrityError`` before any row is returned. ``version``:
    the rows as of that manifest ``sequence`` (readable while ``incsync maintain`` keeps it: its retention).
    Reading starts at the newest ``FULL_REFRESH`` manifest: a full refresh, or the snapshot of the live
    rows (each key's newest row) that maintenance writes, so older manifests are never replayed."""
    store = open_prefix(path, storage_options)
    return read_manifests(store, committed_manifests(store, model, recipient, private=private, version=version),
                          public_key=public_key)


def read_manifests(store: Store, manifests: list[dict], *, public_key: str | bytes | None = None) -> pa.Table:
    """The rows of ``manifests`` (a reader's list, oldest first, from a FULL_REFRESH or the first on)."""
    if public_key is not None:
        from incsync.destinations.object_storage.signing import verify_manifest

        for m in manifests:
            verify_manifest(m, public_key, store=store)
    schema = schema_from_text(manifests[-1]["reader_schema"]) if manifests and "reader_schema" in manifests[-1] else None

    def read(entry: dict) -> pa.Table:
        return pq.read_table(store.path(entry["data_file_key"]), filesystem=store.fs)

    tables: list[pa.Table] = []
    for m in manifests:
        if m.get("delete_files") and tables:
            # A repair or delete: the keys it lists leave (hard) or are stamped in (soft) the rows before it.
            keys = pa.concat_tables([read(f) for f in m["delete_files"]])
            before = _combined(tables, schema)
            tables = [_apply_deletes(before, keys, m.get("delete_mode", "hard"), m.get("deleted_at"))]
        tables += [read(f) for f in m["files"]]
    if not tables:
        return pa.table({})
    return _combined(tables, schema)


def _combined(tables: list[pa.Table], schema: pa.Schema | None) -> pa.Table:
    if schema is not None:
        if any(DELETED_AT in t.schema.names for t in tables) and DELETED_AT not in schema.names:
            schema = schema.append(pa.field(DELETED_AT, pa.timestamp("us", tz="UTC")))
        return pa.concat_tables([conform(t, schema) for t in tables])
    return pa.concat_tables(tables, promote_options="permissive")


def _apply_deletes(table: pa.Table, keys: pa.Table, mode: str, at: str | None) -> pa.Table:
    import pyarrow.compute as pc

    from incsync.core.canonical import arrow_text

    names = keys.schema.names
    listed = pc.is_in(arrow_text(table, names), value_set=arrow_text(keys, names))
    if mode != "soft":
        return table.filter(pc.invert(listed))
    stamp = pa.scalar(datetime.fromisoformat(at) if at else datetime.now(timezone.utc), pa.timestamp("us", tz="UTC"))
    current = table[DELETED_AT] if DELETED_AT in table.schema.names else pa.nulls(table.num_rows, stamp.type)
    stamped = pc.if_else(pc.and_(listed, pc.is_null(current)), stamp, current)
    if DELETED_AT in table.schema.names:
        return table.set_column(table.schema.get_field_index(DELETED_AT), DELETED_AT, stamped)
    return table.append_column(pa.field(DELETED_AT, stamp.type), stamped)


def latest_versions(table: pa.Table, primary_key: list[str], last_modified_column: str) -> pa.Table:
    """What an upsert destination would hold: per primary key, the row with the greatest last-modified,
    and of rows with an equal one the later in ``table`` (a correction replaces the row, as upserts do)."""
    if table.num_rows == 0:
        return table
    order = "_incsync_position"
    numbered = table.append_column(order, pa.array(range(table.num_rows), pa.int64()))
    ranked = numbered.sort_by([*((c, "ascending") for c in primary_key), (last_modified_column, "descending"),
                               (order, "descending")]).drop_columns([order])
    keys = ranked.select(primary_key).to_pylist()
    return ranked.take([i for i, key in enumerate(keys) if i == 0 or key != keys[i - 1]])


def reader_schema(log: TransferLog, store: Store, model: str, recipient: str) -> pa.Schema | None:
    """What a reader of (model, recipient)'s committed manifests gets; None before the first."""
    newest = log.newest(model, recipient)
    if newest is None:
        return None
    if "reader_schema" in newest:
        return schema_from_text(newest["reader_schema"])
    # Manifests from before reader_schema: unify their files' schemas once.
    manifests = committed_manifests(store, model, recipient, private=log.private)
    schemas = [pq.read_schema(store.path(f["data_file_key"]), filesystem=store.fs) for m in manifests for f in m["files"]]
    return pa.unify_schemas(schemas, promote_options="permissive") if schemas else None

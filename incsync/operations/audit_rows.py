"""The rows of the transfer log (``audit:``): one per (run, model, recipient) transfer, the freshness of each
(model, recipient), and which recipient is on which destination. Built from ``list_transfers`` (the runs and
their materializations, read once) and the configuration; written by ``operations.audit``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import dagster as dg
import pyarrow as pa

from incsync.config.model import IncsyncConfig, ModelConfig
from incsync.config.products import receives, tier_of
from incsync.core.bounds import UTC, from_micros, to_micros
from incsync.core.fingerprint import fingerprint
from incsync.operations.metadata import (
    DELTA_ROWS_TRANSFERRED,
    HIGH_WATERMARK,
    HIGH_WATERMARK_EXACT,
    ROWS_TRANSFERRED,
    STAGED_BYTES,
    TRANSFER_BATCH,
    TRANSFER_ID,
)
from incsync.operations.partitions import RECIPIENT_DIM, WINDOW_DIM, model_asset_key, model_partitions
from incsync.operations.statuses import Transfer, TransferStatus

TS = pa.timestamp("us", tz="UTC")
TRANSFERS_SCHEMA = pa.schema([
    ("id", pa.string()), ("run_id", pa.string()), ("model", pa.string()), ("recipient", pa.string()),
    ("windows", pa.int64()), ("first_window", pa.string()), ("last_window", pa.string()), ("status", pa.string()),
    ("blamed", pa.string()), ("blame_reason", pa.string()), ("rows_transferred", pa.int64()),
    ("delta_rows_transferred", pa.int64()), ("high_watermark", TS), ("started_at", TS), ("finished_at", TS),
    ("staged_bytes", pa.int64()), ("mode", pa.string()),
])
FRESHNESS_SCHEMA = pa.schema([
    ("model", pa.string()), ("recipient", pa.string()), ("last_success_high_watermark", TS),
    ("last_success_at", TS), ("lag_seconds", pa.int64()), ("audited_at", TS),
])
DESTINATIONS_SCHEMA = pa.schema([
    ("snapshot_at", TS), ("recipient", pa.string()), ("model", pa.string()), ("destination", pa.string()),
    ("kind", pa.string()), ("location", pa.string()), ("enabled", pa.bool_()), ("tier", pa.string()),
    ("products", pa.string()),
])
FINISHED = {TransferStatus.SUCCESS, TransferStatus.ERROR, TransferStatus.PARTIAL_FAILURE, TransferStatus.CANCELLED,
            TransferStatus.KILLED, TransferStatus.EXPIRED, TransferStatus.ORPHANED}
FAILED = {TransferStatus.ERROR, TransferStatus.PARTIAL_FAILURE, TransferStatus.ORPHANED}


def _hw(metadata: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    """The window's high watermark (exact, as each commit's last window records it; to the UI's float seconds)."""
    exact, value = metadata.get(HIGH_WATERMARK_EXACT), metadata.get(HIGH_WATERMARK)
    return (datetime.fromisoformat(str(exact.value)) if exact is not None and exact.value else None,
            None if value is None or value.value is None else datetime.fromtimestamp(float(value.value), UTC))


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return a if b is None or (a is not None and a >= b) else b


def _per_recipient(transfer: Transfer, models: dict[dg.AssetKey, ModelConfig]) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, recipient) -> counts, windows, HW and staged bytes of the run's committed windows."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    parts: dict[str, dg.MultiPartitionsDefinition] = {}
    for mat in transfer.materializations:
        model = models.get(mat.asset_key)
        if model is None or mat.partition is None:
            continue
        grid = parts.get(model.model_name) or parts.setdefault(model.model_name, model_partitions(model))
        dims = grid.get_partition_key_from_str(mat.partition).keys_by_dimension
        acc = out.setdefault((model.model_name, dims[RECIPIENT_DIM]),
                             {"windows": [], "rows": 0, "delta": 0, "hw": None, "rounded": None, "commits": {}})
        md = mat.metadata
        acc["windows"].append(dims[WINDOW_DIM])
        acc["rows"] += int(md[ROWS_TRANSFERRED].value) if ROWS_TRANSFERRED in md else 0
        acc["delta"] += int(md[DELTA_ROWS_TRANSFERRED].value) if DELTA_ROWS_TRANSFERRED in md else 0
        exact, rounded = _hw(md)  # a float may round up past the exact value: it counts only where no exact one is
        acc["hw"], acc["rounded"] = _later(acc["hw"], exact), _later(acc["rounded"], rounded)
        commit = (md[TRANSFER_ID].value if TRANSFER_ID in md else mat.partition,
                  md[TRANSFER_BATCH].value if TRANSFER_BATCH in md else None)
        if STAGED_BYTES in md:  # on the commit's record, its last window (docs/design.md#metadata)
            acc["commits"][commit] = int(md[STAGED_BYTES].value)
        else:
            acc["commits"].setdefault(commit, 0)
    return out


def _requested_windows(transfer: Transfer, model: ModelConfig, tags: dict[str, str]) -> list[str]:
    """The windows a run was asked for (a failed recipient committed none), from its partition tags."""
    from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    if f"dagster/partition/{WINDOW_DIM}" in tags:
        return [tags[f"dagster/partition/{WINDOW_DIM}"]]
    if ASSET_PARTITION_RANGE_START_TAG in tags:
        parts = model_partitions(model)
        return sorted({parts.get_partition_key_from_str(tags[t]).keys_by_dimension[WINDOW_DIM]
                       for t in (ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG)})
    return []


def transfer_rows(instance: dg.DagsterInstance, config: IncsyncConfig, transfers: Iterable[Transfer]) -> list[dict[str, Any]]:
    """One row per (run, model, recipient) of each finished run, with that recipient's own status and blame."""
    from incsync.operations.blame import each_recipient_blame

    models = {model_asset_key(m): m for m in config.models}
    by_name = {m.model_name: m for m in config.models}
    rows = []
    for t in transfers:
        if t.status not in FINISHED:
            continue
        counts = _per_recipient(t, models)
        run = instance.get_run_by_id(t.run_id) if t.status in FAILED else None
        each = each_recipient_blame(instance, run, t.recipients, orphaned=t.status == TransferStatus.ORPHANED) if (
            run is not None and len(t.recipients) > 1) else {}
        for model in t.models:
            for rid in t.recipients:
                acc = counts.get((model, rid))
                status, blamed, reason = t.status, t.blamed, t.blame_reason
                if rid in each:
                    own = each[rid]
                    blamed, reason = (own.party.value, own.reason) if own else (None, None)
                    status = t.status if own else TransferStatus.SUCCESS  # the run failed, not because of this recipient
                if blamed is not None and status != TransferStatus.ORPHANED:
                    status = TransferStatus.PARTIAL_FAILURE if acc else TransferStatus.ERROR
                windows = sorted(acc["windows"]) if acc else (
                    _requested_windows(t, by_name[model], dict(run.tags)) if run is not None else [])
                rows.append({
                    "id": f"{t.run_id}:{model}:{rid}", "run_id": t.run_id, "model": model, "recipient": rid,
                    "windows": len(acc["windows"]) if acc else 0,
                    "first_window": windows[0] if windows else None, "last_window": windows[-1] if windows else None,
                    "status": status.value, "blamed": blamed, "blame_reason": reason,
                    "rows_transferred": acc["rows"] if acc else 0, "delta_rows_transferred": acc["delta"] if acc else 0,
                    "high_watermark": (acc["hw"] or acc["rounded"]) if acc else None, "started_at": t.started_at,
                    "finished_at": t.finished_at or t.created_at,
                    "staged_bytes": sum(acc["commits"].values()) if acc else 0, "mode": t.mode,
                })
    return rows


def freshness(previous: dict[str, list[int]], rows: Iterable[dict[str, Any]]) -> dict[str, list[int]]:
    """``model|recipient`` -> [last successful HW, its run's end] in epoch microseconds, updated by ``rows``."""
    state = {k: list(v) for k, v in previous.items()}
    for row in rows:
        if row["status"] != TransferStatus.SUCCESS.value or row["high_watermark"] is None:
            continue
        key, hw, at = f'{row["model"]}|{row["recipient"]}', to_micros(row["high_watermark"]), to_micros(row["finished_at"])
        old = state.get(key)
        if old is None or hw > old[0] or (hw == old[0] and at > old[1]):
            state[key] = [hw, at]
    return dict(sorted(state.items()))


def freshness_rows(config: IncsyncConfig, state: dict[str, list[int]], *, now: datetime) -> list[dict[str, Any]]:
    """Every (model, recipient) with a successful transfer, and every enabled subscriber still without one."""
    pairs = {tuple(k.split("|", 1)): v for k, v in state.items()}
    for m in config.models:
        for r in config.recipients:
            if r.enabled and receives(config, r, m.model_name):
                pairs.setdefault((m.model_name, r.id), None)
    out = []
    for (model, rid), value in sorted(pairs.items()):
        hw = from_micros(value[0]) if value else None
        out.append({"model": model, "recipient": rid, "last_success_high_watermark": hw,
                    "last_success_at": from_micros(value[1]) if value else None,
                    "lag_seconds": int((now - hw).total_seconds()) if hw else None, "audited_at": now})
    return out


def destination_rows(config: IncsyncConfig, *, at: datetime) -> tuple[list[dict[str, Any]], str]:
    """Which recipient receives which model on which destination, and the snapshot's fingerprint (``at`` aside)."""
    rows = []
    for r in sorted(config.recipients, key=lambda r: r.id):
        d = config.destination(r.destination)
        tier = tier_of(config, r)
        for m in sorted(config.models, key=lambda m: m.model_name):
            if receives(config, r, m.model_name):
                rows.append({"snapshot_at": at, "recipient": r.id, "model": m.model_name, "destination": d.name,
                             "kind": d.kind, "location": d.described(), "enabled": r.enabled,
                             "tier": tier.name if tier else None,
                             "products": None if r.products is None else ",".join(r.products)})
    return rows, fingerprint({"rows": [{k: v for k, v in row.items() if k != "snapshot_at"} for row in rows]})

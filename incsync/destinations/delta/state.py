"""Where a Delta table keeps each recipient's transfer state so no later commit or checkpoint loses it.

The transfer record rides in its commit's metadata; application transactions (``txn`` actions, which
checkpoints keep for as long as the table lives) hold the high watermark, the fingerprint and the version
of that commit. A reader goes straight to that commit; when log cleanup has removed it, the state is
rebuilt from the transactions alone (high watermark and fingerprint exact, the counts of the last
transfer unknown).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from deltalake import DeltaTable, Transaction

from incsync.destinations.base import INCREMENTAL, TransferRecord

RECORD_KEY = "incsync.transfer"
HISTORY_SCAN = 100  # tables written before the commit pointer existed: how far back to look
_NONE = -(1 << 63)  # a transaction version standing for "no high watermark"
_FINGERPRINT_RE = re.compile(r"[0-9a-f]{16}")


def app_id(model: str, recipient: str) -> str:
    return f"incsync:{model}:{recipient}"


def transactions(record: TransferRecord, *, commit_version: int) -> list[Transaction]:
    """The txn actions committed with ``record`` in the table version ``commit_version``."""
    base = app_id(record.model_name, record.recipient_id)
    hw = record.high_watermark_micros
    txns = [Transaction(base, _NONE if hw is None else hw), Transaction(f"{base}:commit", commit_version)]
    if _FINGERPRINT_RE.fullmatch(record.fingerprint):
        txns.append(Transaction(f"{base}:fingerprint", int(record.fingerprint, 16) + _NONE))
    return txns


def find_record(dt: DeltaTable, *, model: str, recipient: str) -> TransferRecord | None:
    """The last transfer record of (model, recipient) as of the version ``dt`` is loaded at."""
    base = app_id(model, recipient)
    version = dt.transaction_version(f"{base}:commit")
    if version is None:
        return _scan(dt.history(limit=HISTORY_SCAN), model=model, recipient=recipient, hw=dt.transaction_version(base))
    commit = _commit_info(dt, version)
    if commit is not None and commit.get(RECORD_KEY) is not None:
        return _parse(commit[RECORD_KEY])
    hw = dt.transaction_version(base)
    fingerprint = dt.transaction_version(f"{base}:fingerprint")
    return _rebuilt(model, recipient, version=version, hw=hw, fingerprint=fingerprint)


def _commit_info(dt: DeltaTable, version: int) -> dict | None:
    uri = dt.table_uri
    if uri.startswith("file://") or "://" not in uri:
        path = Path(uri.removeprefix("file://")) / "_delta_log" / f"{version:020d}.json"
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return None
        return next((json.loads(line)["commitInfo"] for line in lines if line.startswith('{"commitInfo"')), None)
    for commit in dt.history(limit=dt.version() - version + 1):  # object stores: read through delta-rs
        if commit.get("version") == version:
            return commit
    return None


def _parse(raw: object) -> TransferRecord:
    return TransferRecord.from_json(raw if isinstance(raw, str) else json.dumps(raw))


def _scan(history: list[dict], *, model: str, recipient: str, hw: int | None) -> TransferRecord | None:
    for commit in history:
        raw = commit.get(RECORD_KEY)
        if raw is None:
            continue
        record = _parse(raw)
        if record.recipient_id == recipient and record.model_name == model:
            return record
    if hw is None:
        return None
    return _rebuilt(model, recipient, version=None, hw=hw, fingerprint=None)


def _rebuilt(model: str, recipient: str, *, version: int | None, hw: int | None, fingerprint: int | None) -> TransferRecord:
    """The state the transactions hold, when the record's commit is no longer in the log."""
    return TransferRecord(
        transfer_id=f"delta-txn-v{version}", model_name=model, recipient_id=recipient,
        window_start="", window_end="", lower_bound="", upper_bound="", rows_transferred=0, delta_rows_transferred=0,
        high_watermark_micros=None if hw in (None, _NONE) else hw, transfer_type=INCREMENTAL,
        fingerprint="" if fingerprint is None else f"{fingerprint - _NONE:016x}", lookback_seconds=0, committed_at="",
        extra={"rebuilt_from": "delta application transactions"},
    )

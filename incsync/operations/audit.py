"""The transfer log in the provider's warehouse (``audit:``): the pass the `incsync_audit` asset
(``orchestration.housekeeping``) runs, for its schedule and `incsync audit`.

Each pass reads the runs whose status changed since the log's cursor (less ``lookback_seconds``) through
``list_transfers`` and publishes three tables through the destination protocol, like a model: staged,
upserted on their keys, each with a transfer record committed with its rows. The record's high watermark
is the cursor, so a pass that dies after one publish loses nothing and a pass run twice adds no row twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import dagster as dg
import pyarrow as pa

from incsync.config.jobs import AUDIT_GROUP
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.core.bounds import UTC, from_micros, to_micros
from incsync.core.crashpoints import crash_point
from incsync.core.fingerprint import fingerprint, model_fingerprint
from incsync.core.transfer_id import new_transfer_id
from incsync.destinations.base import FULL_REFRESH, INCREMENTAL, Destination, DestinationState, TransferRecord
from incsync.errors import ConfigError
from incsync.operations.audit_rows import (
    DESTINATIONS_SCHEMA,
    FRESHNESS_SCHEMA,
    TRANSFERS_SCHEMA,
    destination_rows,
    freshness,
    freshness_rows,
    transfer_rows,
)

GROUP = AUDIT_GROUP  # the log's tables' source, as the destinations see them, and its asset's group
OWNER = "incsync_audit"  # the recipient id the log's tables are stamped with: the provider's own
TRANSFERS, FRESHNESS, DESTINATIONS = "transfers", "recipient_freshness", "recipient_destinations"
# table -> (schema, primary key, last-modified column)
TABLES: dict[str, tuple[pa.Schema, list[str], str]] = {
    TRANSFERS: (TRANSFERS_SCHEMA, ["id"], "finished_at"),
    FRESHNESS: (FRESHNESS_SCHEMA, ["model", "recipient"], "audited_at"),
    DESTINATIONS: (DESTINATIONS_SCHEMA, ["snapshot_at", "recipient", "model"], "snapshot_at"),
}
THROUGH = "through"  # extra of the freshness record: the end of the last transfer its state holds (epoch µs)
STATE = "state"  # ... and that state (model|recipient -> [HW, end] in epoch µs)
PAIRS = "pairs"  # ... and the fingerprint of the (model, recipient) pairs it wrote
SNAPSHOT = "snapshot"  # extra of the destinations record: the fingerprint of the last snapshot


def table_model(name: str) -> ModelConfig:
    """One log table as the destinations see a model: its name, key and last-modified column."""
    schema, key, last_modified = TABLES[name]
    return ModelConfig(model_name=name, source=GROUP, source_table=name, columns=schema.names, primary_key=key,
                       last_modified_column=last_modified, organization_column="recipient", min_start_time_epoch=0)


def owner(config: IncsyncConfig) -> RecipientConfig:
    assert config.audit is not None
    return RecipientConfig(id=OWNER, id_in_provider_system=OWNER, destination=config.audit.destination)


@dataclass(frozen=True)
class Appended:
    """What one pass wrote to one table."""

    table: str
    rows: int  # rows written (upserted): the lookback's re-read rows included
    new_rows: int  # of which past the table's previous high watermark
    high_watermark: datetime | None

    def line(self) -> str:
        return lines(summary([self]))[list(TABLES).index(self.table)]


def _cursor(state: DestinationState) -> int | None:
    last = state.last_transfer
    return None if last is None or state.reset_reason else last.high_watermark_micros


def _extra(state: DestinationState, key: str) -> str | None:
    last = state.last_transfer
    return None if last is None or state.reset_reason else last.extra.get(key)


def _publish(config: IncsyncConfig, destination: Destination, name: str, rows: list[dict[str, Any]], *,
             state: DestinationState, upper: datetime, extra: dict[str, str], staging_dir: str) -> Appended:
    from incsync.staging.batch import stage_arrow
    from incsync.staging.folders import remove
    from incsync.storage.files import staging_root

    assert config.audit is not None
    schema, _, last_modified = TABLES[name]
    model = table_model(name)
    old = _cursor(state)
    stamps = [to_micros(r[last_modified]) for r in rows]
    new_rows = sum(1 for s in stamps if old is None or s > old)
    hw = max([*stamps, *([old] if old is not None else [])], default=None)
    lower = from_micros(old - config.audit.lookback_seconds * 1_000_000) if old is not None else from_micros(0)
    record = TransferRecord(
        transfer_id=new_transfer_id(), model_name=name, recipient_id=OWNER, window_start=lower.isoformat(),
        window_end=upper.isoformat(), lower_bound=lower.isoformat(), upper_bound=upper.isoformat(),
        rows_transferred=len(rows), delta_rows_transferred=new_rows, high_watermark_micros=hw,
        transfer_type=FULL_REFRESH if state.reset_reason else INCREMENTAL, fingerprint=model_fingerprint(model),
        lookback_seconds=config.audit.lookback_seconds, committed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        extra={**extra, **({"full_refresh_reason": state.reset_reason} if state.reset_reason else {})},
    )
    folder = staging_root(staging_dir, config.staging_storage_options) / f"incsync_audit-{record.transfer_id}"
    try:
        batch = stage_arrow(pa.Table.from_pylist(rows, schema=schema), folder)
        destination.publish(model=model, recipient=owner(config), batch=batch, record=record, expected=state)
    finally:
        remove(folder)
    return Appended(name, len(rows), new_rows, None if hw is None else from_micros(hw))


def run_audit(config: IncsyncConfig, instance: dg.DagsterInstance, *, staging_dir: str,
              now: datetime | None = None) -> list[Appended]:
    """Append what changed since the last pass to the three tables; a table with nothing new gets no commit.
    Each table's rows are staged under ``staging_dir`` (the definitions' staging folder) on their way."""
    from incsync.destinations.registry import build_destination
    from incsync.operations.statuses import list_transfers

    if config.audit is None:
        raise ConfigError("audit", ["the file has no `audit:` section: add `audit: {destination: <name>}` "
                                    "naming one of the provider's destinations (docs/operations.md)"])
    now = now or datetime.now(UTC)
    destination = build_destination(config.destination(config.audit.destination))
    states = {name: destination.read_state(model=table_model(name), recipient=owner(config)) for name in TABLES}
    logged, through = _cursor(states[TRANSFERS]), _extra(states[FRESHNESS], THROUGH)
    since = None if logged is None or through is None else min(logged, int(through))
    lookback = timedelta(seconds=config.audit.lookback_seconds)
    transfers = list_transfers(instance, config, limit=None, now=now,
                               updated_after=None if since is None else from_micros(since) - lookback)
    rows = sorted(transfer_rows(instance, config, transfers), key=lambda r: (r["finished_at"], r["id"]))
    done = []
    if rows:
        done.append(_publish(config, destination, TRANSFERS, rows, state=states[TRANSFERS], upper=now, extra={},
                             staging_dir=staging_dir))
    crash_point("audit_after_transfers")  # the next pass reads from the freshness's own cursor: nothing is lost

    known = json.loads(_extra(states[FRESHNESS], STATE) or "{}")
    state = freshness(known, rows)
    fresh = freshness_rows(config, state, now=now)
    end = max([to_micros(r["finished_at"]) for r in rows] + ([int(through)] if through is not None else []), default=None)
    pairs = fingerprint({"pairs": [(r["model"], r["recipient"]) for r in fresh]})  # a new subscriber gets its row
    if fresh and (state != known or rows or pairs != _extra(states[FRESHNESS], PAIRS)):
        done.append(_publish(config, destination, FRESHNESS, fresh, state=states[FRESHNESS], upper=now,
                             extra={STATE: json.dumps(state, separators=(",", ":")), PAIRS: pairs,
                                    **({THROUGH: str(end)} if end is not None else {})}, staging_dir=staging_dir))

    snapshot, digest = destination_rows(config, at=now)
    if snapshot and digest != _extra(states[DESTINATIONS], SNAPSHOT):
        done.append(_publish(config, destination, DESTINATIONS, snapshot, state=states[DESTINATIONS], upper=now,
                             extra={SNAPSHOT: digest}, staging_dir=staging_dir))
    return done


def summary(done: list[Appended]) -> dict[str, int | str]:
    """The pass's counts, as the materialization's metadata (``<table>_rows``, ``<table>_new_rows``, and the
    high watermark of each table written)."""
    out: dict[str, int | str] = {}
    for name in TABLES:
        got = next((a for a in done if a.table == name), None)
        out[f"{name}_rows"], out[f"{name}_new_rows"] = (got.rows, got.new_rows) if got else (0, 0)
        if got is not None and got.high_watermark is not None:
            out[f"{name}_high_watermark"] = got.high_watermark.isoformat()
    return out


def lines(metadata: dict[str, Any]) -> list[str]:
    """What `incsync audit` prints: one line a table, from a pass's metadata (``summary``)."""
    return [f"{name}: {metadata[f'{name}_rows']} row(s) written, {metadata[f'{name}_new_rows']} new"
            + (f", high watermark {metadata[f'{name}_high_watermark']}" if f"{name}_high_watermark" in metadata else "")
            for name in TABLES]

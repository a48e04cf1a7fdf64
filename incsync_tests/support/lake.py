"""Helpers for tests: write lake tables, write configs, run transfers through Dagster."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from incsync.spark.session import spark_config

UTC = timezone.utc
JAN1 = datetime(2024, 1, 1, tzinfo=UTC)
JAN1_EPOCH = 1704067200

SPARK_TEST_CONFIG = spark_config({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})

ORDERS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("organization_id", pa.string()),
        ("status", pa.string()),
        ("amount", pa.float64()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)


def ts(day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    """A UTC time in January 2024."""
    return datetime(2024, 1, day, hour, minute, second, micro, tzinfo=UTC)


def order(id: int, org: str, updated_at: datetime, status: str = "new", amount: float = 1.0) -> dict[str, Any]:
    return {"id": id, "organization_id": org, "status": status, "amount": amount, "updated_at": updated_at}


def write_table(root: Path, name: str, rows: Sequence[dict[str, Any]], schema: pa.Schema = ORDERS_SCHEMA) -> Path:
    """Replace the lake table ``root/name`` with ``rows`` (one Parquet file)."""
    folder = root / name
    if folder.exists():
        for f in folder.iterdir():
            f.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), folder / "part-0.parquet")
    return folder


def lake_config(
    root: Path,
    *,
    recipients: Iterable[dict[str, Any]] = ({"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},),
    destinations: Iterable[dict[str, Any]] | None = None,
    model: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
) -> Path:
    """Write an incsync.yaml for a lake source ``root/src`` and Delta destinations under ``root/out``."""
    base_model = {
        "model_name": "orders",
        "source": "lake",
        "source_table": "orders",
        "columns": ["id", "organization_id", "status", "amount", "updated_at"],
        "primary_key": ["id"],
        "last_modified_column": "updated_at",
        "organization_column": "organization_id",
        "max_transfer_time_window_seconds": 86400,
        "min_start_time_epoch": JAN1_EPOCH,
    }
    recipients = list(recipients)
    if destinations is None:
        destinations = [
            {"name": r["destination"], "kind": "delta", "path": f"./out/{r['id']}"} for r in recipients
        ]
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": "./src", "format": "parquet", **(source or {})}],
        "destinations": list({d["name"]: d for d in destinations}.values()),
        "models": [{**base_model, **(model or {})}],
        "recipients": recipients,
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def materialize_partition(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    window: str,
    recipient: str,
    model_key: Sequence[str] = ("lake", "orders"),
    tags: dict[str, str] | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """Materialize one (window, recipient) partition through the asset job, as the UI would."""
    from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key

    if not instance.has_dynamic_partition(RECIPIENTS_PARTITIONS, recipient):
        instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, [recipient])
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance,
        partition_key=partition_key(window, recipient),
        asset_selection=[dg.AssetKey(list(model_key))],
        tags=tags or {},
        raise_on_error=raise_on_error,
    )


def latest_metadata(instance: dg.DagsterInstance, model_key: Sequence[str] = ("lake", "orders")) -> dict[str, Any]:
    """The latest materialization's metadata, with its commit's record where the window links to it
    (``transfer_record``, docs/design.md#metadata: what one click in the UI shows); the window's own
    counts and id win."""
    key = dg.AssetKey(list(model_key))
    event = instance.get_latest_materialization_event(key)
    assert event is not None and event.asset_materialization is not None
    own = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    if "transfer_record" not in own:
        return own
    from urllib.parse import parse_qs, urlsplit

    partition = parse_qs(urlsplit(own["transfer_record"]).query)["partition"][0]
    [record] = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1).records
    assert record.event_log_entry.run_id == event.run_id, "a window's record is stored by the same run"
    return {**{k: v.value for k, v in record.asset_materialization.metadata.items()}, **own}


def delta_rows(path: Path, sort: str = "id") -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table().sort_by(sort).to_pylist()


def at(epoch: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=epoch)

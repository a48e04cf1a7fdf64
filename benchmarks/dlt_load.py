"""The dlt peer of one incsync transfer: one tenant of ``orders`` into Delta or PostgreSQL.

Run by ``compare_dlt.py`` as a fresh process per load, as a user would run a dlt pipeline:
``sql_table`` with the pyarrow backend, the tenant filter pushed into the query, merge on the primary
key, incremental on ``updated_at``. Pipeline state lives in ``--pipelines-dir`` (and the destination),
so a second call with the same arguments is an incremental load. Prints ``rows=<n>``.

With several ``--tenant``s (``--dataset-prefix`` instead of ``--dataset``) it loads each tenant's own
pipeline one after the other in this one process: dlt's counterpart of a resident incsync worker.
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dsn", required=True, help="postgresql://user@host:port/db")
    parser.add_argument("--tenant", action="append", required=True, help="repeatable: one pipeline per tenant")
    parser.add_argument("--destination", choices=["delta", "postgres"], required=True)
    parser.add_argument("--delta-path", help="bucket_url of the filesystem destination (delta)")
    parser.add_argument("--dest-dsn", help="postgresql://... (postgres)")
    names = parser.add_mutually_exclusive_group(required=True)
    names.add_argument("--dataset", help="dataset (schema / folder) name, for one tenant")
    names.add_argument("--dataset-prefix", help="datasets <prefix>_<tenant>, for several tenants")
    parser.add_argument("--pipelines-dir", required=True)
    args = parser.parse_args()
    os.environ.setdefault("RUNTIME__LOG_LEVEL", "ERROR")
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")

    import dlt

    for tenant in args.tenant:
        load(dlt, args, tenant, args.dataset or f"{args.dataset_prefix}_{tenant}")


def load(dlt, args: argparse.Namespace, tenant: str, dataset: str) -> None:  # noqa: ANN001 - the dlt module
    from dlt.sources.sql_database import sql_table

    def only_tenant(query, table):  # noqa: ANN001, ANN202 - dlt's callback shape
        return query.where(table.c.organization_id == tenant)

    resource = sql_table(
        credentials=args.source_dsn,
        table="orders",
        schema="public",
        backend="pyarrow",
        incremental=dlt.sources.incremental("updated_at"),
        query_adapter_callback=only_tenant,
        write_disposition="merge",
        primary_key="id",
    )
    if args.destination == "delta":
        destination = dlt.destinations.filesystem(bucket_url=args.delta_path)
        resource.apply_hints(table_format="delta")
    else:
        destination = dlt.destinations.postgres(credentials=args.dest_dsn)
    pipeline = dlt.pipeline(
        pipeline_name=f"bench_{dataset}",
        destination=destination,
        dataset_name=dataset,
        pipelines_dir=args.pipelines_dir,
    )
    pipeline.run(resource)
    counts = pipeline.last_trace.last_normalize_info.row_counts
    print(f"rows={counts.get('orders', 0)}", flush=True)


if __name__ == "__main__":
    main()

"""The dlt peer of one incsync transfer: one tenant of ``orders`` into Delta, PostgreSQL, DuckDB, Iceberg or MariaDB.

Run by ``compare_dlt.py`` as a fresh process per load, as a user would run a dlt pipeline:
``sql_table`` with the pyarrow backend, the tenant filter pushed into the query, merge on the primary
key, incremental on ``updated_at``. Each destination is dlt's own for that kind, default settings:

  delta     ``filesystem`` with ``table_format="delta"`` (merge strategy upsert, delta-rs)
  postgres  ``postgres`` (merge: delete-insert through a staging dataset)
  duckdb    ``duckdb`` on one file per dataset (merge: delete-insert through a staging dataset)
  iceberg   ``filesystem`` with ``table_format="iceberg"`` (merge strategy upsert, pyiceberg)
  mariadb   ``sqlalchemy`` with a ``mysql+pymysql://`` URL (merge: delete-insert; the dataset is a
            MariaDB database of its own, and ``<dataset>_staging`` beside it)

Pipeline state lives in ``--pipelines-dir`` (and the destination),
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
    parser.add_argument("--destination", choices=["delta", "postgres", "duckdb", "iceberg", "mariadb"], required=True)
    parser.add_argument("--delta-path", help="bucket_url of the filesystem destination (delta, iceberg); folder of the "
                        "database files (duckdb: <folder>/<dataset>/dlt.duckdb)")
    parser.add_argument("--dest-dsn", help="postgresql://... (postgres) or mysql+pymysql://... (mariadb)")
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
    if args.destination in ("delta", "iceberg"):
        destination = dlt.destinations.filesystem(bucket_url=args.delta_path)
        resource.apply_hints(table_format=args.destination)
    elif args.destination == "duckdb":
        os.makedirs(os.path.join(args.delta_path, dataset), exist_ok=True)  # a file named as its schema is ambiguous
        destination = dlt.destinations.duckdb(credentials=os.path.join(args.delta_path, dataset, "dlt.duckdb"))
    elif args.destination == "mariadb":
        destination = dlt.destinations.sqlalchemy(credentials=args.dest_dsn)
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

"""Apache Iceberg destination through pyiceberg: one table per model in a SQL (or REST) catalog's namespace,
each publish one catalog commit (``destination``), the upsert decided in Arrow (``rows``), data files
rewritten copy-on-write (``files``), types (``types``), catalog and table properties (``catalog``)."""

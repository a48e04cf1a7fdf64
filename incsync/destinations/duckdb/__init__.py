"""DuckDB destination: one database file, a table per model in one schema, the transfer log beside it."""

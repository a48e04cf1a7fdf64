"""Apache Iceberg destination through pyiceberg (kind: iceberg)."""

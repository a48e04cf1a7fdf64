"""Integrity: verify a copy against its source by hashed buckets, repair what differs."""

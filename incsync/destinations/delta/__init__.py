"""Delta Lake tables through delta-rs: one MERGE commit per batch carrying its transfer record,
type widening by rewrite, and where each recipient's state lives in the log.
"""

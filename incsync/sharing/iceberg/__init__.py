"""The read-only Iceberg REST catalog of `incsync serve`: each recipient's Iceberg tables under its own prefix and
token, planned on the server, their data files read through an S3-compatible endpoint with vended credentials.

Its routes (``routes``) answer from ``answers``; ``metadata`` turns a table's metadata into what a reader sees,
``credentials`` vends and checks the storage credentials (AWS Signature V4, ``sigv4``). Imports the sharing
server's catalog, tokens and signer, never a destination kind's module.
"""

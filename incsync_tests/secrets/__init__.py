"""Tests of incsync.secrets: the vault and the environment as secret stores."""

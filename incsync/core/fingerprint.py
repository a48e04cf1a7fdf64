"""The model fingerprint: a digest of the fields that shape a model's rows (its Dagster ``code_version``).

A transfer records it; ``incsync state`` and the dry run compare it with the configuration's to say
that the model changed since the recipient's copy was written.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol


class RowShape(Protocol):
    """The fields that decide what a model's rows are and how they are keyed (a model of the configuration
    is one)."""

    @property
    def columns(self) -> list[str] | None: ...

    @property
    def primary_key(self) -> list[str]: ...

    @property
    def last_modified_column(self) -> str: ...

    @property
    def last_modified_timezone(self) -> str | None: ...

    @property
    def organization_column(self) -> str | None: ...

    @property
    def tenancy(self) -> str: ...

    @property
    def source_table(self) -> str | None: ...

    @property
    def source_query(self) -> str | None: ...

    @property
    def column_types(self) -> dict[str, str] | None: ...


def fingerprint(parts: dict[str, object]) -> str:
    """A short, stable digest of ``parts``."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def model_fingerprint(model: RowShape) -> str:
    """The fingerprint of the fields that decide what a model's rows are and how they are keyed."""
    return fingerprint(
        {
            "columns": model.columns,
            "primary_key": model.primary_key,
            "last_modified_column": model.last_modified_column,
            "last_modified_timezone": model.last_modified_timezone,
            "organization_column": model.organization_column,
            "tenancy": model.tenancy,
            "source_table": model.source_table,
            "source_query": model.source_query,
            # only when set: models without column_types keep the fingerprint they had before the field existed
            **({"column_types": model.column_types} if model.column_types else {}),
        }
    )

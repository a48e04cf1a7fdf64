"""Fixtures of the automation tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def instance(dagster_instance) -> Iterator[object]:
    """A persistent (SQLite) Dagster instance in the test's own folder."""
    yield dagster_instance

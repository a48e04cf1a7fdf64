"""A fan-out read split by tenant: folders are named by the tenant's index in the plan, never by its value,
so every value ``validate`` accepts (255 characters of any script, path characters) is staged."""

from __future__ import annotations

from pathlib import Path

import pytest

from incsync.core.limits import MAX_VALUE_LENGTH
from incsync.staging.spark import TENANT_PARTITION, stage_by_tenant

LONG = "ü" * (MAX_VALUE_LENGTH - 5) + "-long"  # 255 characters, 505 bytes of UTF-8, 1,505 URL-encoded
TENANTS = [LONG, "a/b=c%2F", "..", "  padded  ", "ACME", "acme", "o'brien"]


def _frame(spark, stray: str | None = None):
    rows = [(i, tenant) for i, tenant in enumerate(TENANTS) for _ in range(2)]
    rows += [(100, stray)] if stray is not None else []
    return spark.createDataFrame([(i * 10 + n, t) for n, (i, t) in enumerate(rows)], "id long, org string")


@pytest.mark.parametrize("collect", [False, True], ids=["spark-write", "arrow-collect"])
def test_every_tenant_value_is_staged_under_a_name_of_its_index(spark, tmp_path: Path, collect: bool) -> None:
    schema, batches = stage_by_tenant(_frame(spark), tmp_path / "fan", "org", TENANTS, collect=collect)
    assert sorted(batches) == sorted(TENANTS)
    for tenant, batch in batches.items():
        assert batch.table()["org"].to_pylist() == [tenant, tenant]
    names = sorted(p.name for p in (tmp_path / "fan").iterdir())
    if not collect:
        assert names == [f"{TENANT_PARTITION}={i}" for i in range(len(TENANTS))]
    assert all(len(name.encode()) < 40 for name in names)


def test_rows_of_no_tenant_of_the_plan_are_keyed_by_their_values(spark, tmp_path: Path) -> None:
    _, batches = stage_by_tenant(_frame(spark, stray="42"), tmp_path / "fan", "org", TENANTS[:2])
    assert sorted(batches) == sorted(["42", *TENANTS[2:], *TENANTS[:2]])
    assert batches["42"] is batches["acme"]  # one folder holds every stray row
    assert batches["42"].rows == 2 * (len(TENANTS) - 2) + 1
    assert [batches[t].rows for t in TENANTS[:2]] == [2, 2]

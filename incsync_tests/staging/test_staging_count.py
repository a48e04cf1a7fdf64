"""Faults issue, item 8: staging the driver cannot see must fail the transfer, never publish nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import incsync.staging.spark as staging
from incsync.errors import StagingError
from incsync.staging.spark import stage, stage_by_tenant


def _frame(spark):
    return spark.createDataFrame([(i, f"org_{i % 2}") for i in range(10)], "id long, org string")


def test_spark_staging_reports_what_it_wrote(spark, tmp_path: Path) -> None:
    batch = stage(_frame(spark), tmp_path / "s")
    assert batch.rows == 10
    schema, by_tenant = stage_by_tenant(_frame(spark), tmp_path / "t", "org", ["org_0", "org_1"])
    assert {k: b.rows for k, b in by_tenant.items()} == {"org_0": 5, "org_1": 5}


@pytest.mark.parametrize("split", [False, True], ids=["one-batch", "by-tenant"])
def test_files_written_where_this_process_cannot_see_them_fail_naming_staging(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    real = staging.write_observed

    def on_other_disks(df, path, **kwargs):  # the executors' files land where this process cannot see them
        written = real(df, path, **kwargs)
        for part in path.rglob("*.parquet"):
            part.unlink()
        return written

    monkeypatch.setattr(staging, "write_observed", on_other_disks)
    path = tmp_path / "staged"
    with pytest.raises(StagingError) as caught:
        if split:
            stage_by_tenant(_frame(spark), path, "org", ["org_0", "org_1"])
        else:
            stage(_frame(spark), path)
    assert str(caught.value) == (
        f"staging {path}: Spark wrote 10 row(s) but 0 are visible here; nothing was published. Spark's executors "
        "and this process must share the staging folder: set `staging_dir` (or INCSYNC_STAGING_DIR) to storage "
        "both can reach."
    )

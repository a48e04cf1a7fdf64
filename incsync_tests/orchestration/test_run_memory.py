"""A model's run holds memory that does not grow with its partitions (issue 50): a run over many
(window, recipient) partitions with no rows peaks within a bound of the same run over few."""

from __future__ import annotations

import tracemalloc
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from incsync.operations.dagster_compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG, event_log_storage_config
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.lake import JAN1, lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
RECIPIENTS = 4
FEW_WINDOWS, MANY_WINDOWS = 2, 2_500  # hourly: 8 partitions against 10,000
ALLOWANCE_BYTES = 4_000_000  # what a bigger run may hold beyond 1.5x the small one's peak, whatever its size


def _peak_of_run(root: Path, windows: int) -> tuple[bool, int, int]:
    """The Python allocation peak (tracemalloc) of one run of the model's job over ``RECIPIENTS`` recipients
    × ``windows`` hourly windows, none of which has a row; and how many partitions it materialized."""
    write_table(root / "src", "orders", [order(1, "org_elsewhere", ts(1, 10))])  # no row of any recipient
    recipients = [{"id": f"r{i}", "id_in_provider_system": f"org_{i}", "destination": f"r{i}_delta"} for i in range(RECIPIENTS)]
    defs = build_definitions(lake_config(root, recipients=recipients, model={"max_transfer_time_window_seconds": 3600}))
    home = root / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides={"event_log_storage": event_log_storage_config(home)}) as instance:
        instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, [r["id"] for r in recipients])
        last = (JAN1 + timedelta(hours=windows - 1)).strftime("%Y-%m-%d-%H:%M")
        tags = {ASSET_PARTITION_RANGE_START_TAG: str(partition_key("2024-01-01-00:00", "r0")),
                ASSET_PARTITION_RANGE_END_TAG: str(partition_key(last, f"r{RECIPIENTS - 1}"))}
        tracemalloc.start()
        try:
            result = defs.resolve_job_def("orders").execute_in_process(
                instance=instance, asset_selection=[MODEL], tags=tags, raise_on_error=False)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        materialized = instance.get_materialized_partitions(MODEL)
        return result.success, peak, len(materialized)


@pytest.mark.slow  # ~2 min: two Delta transfers' runs under tracemalloc, 10,000 windows stored; make test-long
def test_a_run_of_many_partitions_peaks_within_a_run_of_few(spark: object, tmp_path: Path) -> None:
    few_ok, few_peak, few_done = _peak_of_run(tmp_path / "few", FEW_WINDOWS)
    many_ok, many_peak, many_done = _peak_of_run(tmp_path / "many", MANY_WINDOWS)

    assert (few_ok, few_done, many_ok, many_done) == (True, RECIPIENTS * FEW_WINDOWS, True, RECIPIENTS * MANY_WINDOWS)
    assert many_peak <= 1.5 * few_peak + ALLOWANCE_BYTES, (
        f"{RECIPIENTS * MANY_WINDOWS} partitions peaked at {many_peak / 1e6:.1f} MB, "
        f"{RECIPIENTS * FEW_WINDOWS} at {few_peak / 1e6:.1f} MB")

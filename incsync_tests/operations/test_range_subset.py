"""A run's output context holds its range of a model's grid as masks (``dagster_compat.range_subset``): the same
keys Dagster's own subset of the range holds, the same range, for any grid whichever dimension is named first."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.definitions.partitions.subset import DefaultPartitionsSubset

from incsync.operations.dagster_compat.range_subset import RangeGridSubset, grid_of_range, install_range_subsets

DAILY = dg.DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-02-01")
RECIPIENTS = ["r2", "a-b", "r1", "z", "é 1"]  # registration order, not sorted


def _grid(first: str) -> dg.MultiPartitionsDefinition:
    dims = {"window": DAILY, "recipient": dg.DynamicPartitionsDefinition(name="rcpts")}
    return dg.MultiPartitionsDefinition(dims if first == "window" else dict(reversed(dims.items())))


@pytest.mark.parametrize("first", ["window", "recipient"])
@pytest.mark.parametrize(("start", "end"), [
    (("2025-01-03", "r1"), ("2025-01-20", "é 1")),
    (("2025-01-01", "r2"), ("2025-01-31", "é 1")),   # everything
    (("2025-01-05", "z"), ("2025-01-05", "z")),      # one partition
    (("2025-01-09", "z"), ("2025-01-08", "z")),      # windows backwards: none
])
def test_the_masks_of_a_range_are_dagsters_keys_of_it(first: str, start: tuple[str, str], end: tuple[str, str]) -> None:
    definition = _grid(first)
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("rcpts", RECIPIENTS)
        key_range = dg.PartitionKeyRange(*(str(dg.MultiPartitionKey({"window": w, "recipient": r})) for w, r in (start, end)))
        expected = definition.get_partition_keys_in_range(key_range, dynamic_partitions_store=instance)
        subset = grid_of_range(definition, key_range, instance)
        assert isinstance(subset, RangeGridSubset)
        assert sorted(subset.get_partition_keys()) == sorted(expected)
        assert {type(k) for k in subset.get_partition_keys()} <= {str}  # plain text: ~70 bytes a key, not ~550
        assert len(subset) == len(expected)
        assert all(k in subset for k in expected)
        assert subset == DefaultPartitionsSubset(set(expected))
        assert subset.get_partition_key_ranges(definition) == ([key_range] if expected else [])


def _key(window: str, recipient: str) -> str:
    return str(dg.MultiPartitionKey({"window": window, "recipient": recipient}))


class _Checking(dg.ConfigurableIOManager):
    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        subset = context._asset_partitions_subset  # noqa: SLF001 - what Dagster holds for the output's whole handle_output
        assert isinstance(subset, RangeGridSubset), type(subset)
        assert context.asset_partition_key_range == dg.PartitionKeyRange(_key("2025-01-02", "r1"), _key("2025-01-04", "z"))
        assert sorted(context.asset_partition_keys) == sorted(_key(f"2025-01-0{d}", r) for d in (2, 3, 4) for r in ("r1", "z"))

    def load_input(self, context: dg.InputContext) -> None:
        return None


@dg.asset(partitions_def=_grid("window"), io_manager_key="checking")
def shipped() -> int:
    install_range_subsets()  # as a model's asset does: in the run, before its output is handled
    return 1


def test_dagster_builds_the_output_context_of_a_run_over_a_grid_range_with_it() -> None:
    """Pins ``output._key_range_to_subset``: Dagster's ``get_output_context`` builds the output's partitions with it."""
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("rcpts", RECIPIENTS)
        result = dg.materialize([shipped], instance=instance, resources={"checking": _Checking()},
                                tags={"dagster/asset_partition_range_start": _key("2025-01-02", "r1"),
                                      "dagster/asset_partition_range_end": _key("2025-01-04", "z")})
        assert result.success
        assert len(instance.get_materialized_partitions(shipped.key)) == 6

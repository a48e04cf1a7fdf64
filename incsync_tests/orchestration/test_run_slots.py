"""Who holds a run's transfer slots: the IO manager, for one block from the first destination state it
reads to its last publish; the asset only plans, and hands over plain values."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from pathlib import Path

import dagster as dg

from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.operations.slots import FileSlots
from incsync.orchestration.definitions import build_definitions
from incsync.transfer.request import TransferPlan
from incsync_tests.support.lake import lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
RUN_SLOTS = ("destination:acme_delta", "source:lake")  # the slots of a run of orders to acme's destination


def _free(instance: dg.DagsterInstance) -> dict[str, bool]:
    """Whether each of the run's slots can be taken now (taken and given back at once)."""
    slots = FileSlots(Path(instance.root_directory) / "incsync-slots")
    free = {}
    for key in RUN_SLOTS:
        handle = slots.try_take(key, 0, "the test")
        free[key] = handle is not None
        if handle is not None:
            slots.release(handle)
    return free


def test_the_asset_hands_over_a_plan_of_plain_values_and_holds_no_slot(spark, tmp_path: Path, dagster_instance) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1))])
    defs = build_definitions(lake_config(tmp_path))
    seen: dict[str, object] = {}

    class Receiving(dg.IOManager):
        def handle_output(self, context: dg.OutputContext, obj: object) -> None:
            seen["plan"], seen["free"] = obj, _free(dagster_instance)

        def load_input(self, context: dg.InputContext) -> None:
            return None

    dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
    result = dg.materialize(
        [defs.get_assets_def(MODEL)], instance=dagster_instance,
        resources={**defs.resources, "incsync_io_manager": Receiving()},
        tags={"dagster/asset_partition_range_start": str(partition_key("2024-01-01", "acme")),
              "dagster/asset_partition_range_end": str(partition_key("2024-01-03", "acme"))},
    )
    assert result.success
    plan = seen["plan"]
    assert isinstance(plan, TransferPlan)
    assert [(t.recipient.id, t.destination.name, [w.window_key for w in t.windows]) for t in plan.transfers] == [
        ("acme", "acme_delta", ["2024-01-01", "2024-01-02", "2024-01-03"])]
    # Frozen values through and through: no lifetime rides along (a release callback, a held lock).
    assert all(is_dataclass(v) and v.__dataclass_params__.frozen for v in (plan, plan.run, *plan.transfers, *plan.requests))
    assert not any(callable(getattr(plan, f.name)) for f in fields(plan))
    assert seen["free"] == {"destination:acme_delta": True, "source:lake": True}  # the asset took none


def test_a_run_whose_publish_fails_releases_its_slots(spark, tmp_path: Path, dagster_instance) -> None:
    """A row without its primary key fails validation inside the publish: the run fails, naming it, and
    its slots are free again once the run is over (taken once, released once)."""
    write_table(tmp_path / "src", "orders", [order(None, "org_1", ts(1, 1))])  # type: ignore[arg-type] - no key
    defs = build_definitions(lake_config(tmp_path))
    dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme"])
    result = defs.resolve_job_def("orders").execute_in_process(
        instance=dagster_instance, partition_key=str(partition_key("2024-01-01", "acme")), raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    assert "model orders, recipient acme, window 2024-01-01 not committed: ValidationError" in failure.step_failure_data.error.message
    lines = [e.user_message for e in dagster_instance.all_logs(result.run_id) if e.user_message.startswith("transfer slots ")]
    assert [line.split(":")[0] for line in lines] == ["transfer slots taken", "transfer slots released"]
    assert _free(dagster_instance) == {"destination:acme_delta": True, "source:lake": True}

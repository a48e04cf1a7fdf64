"""The soak's reader checks see each fault they count (so its zeros mean something)."""

from __future__ import annotations

from incsync_tests.faults.soak import check_snapshot
from incsync_tests.support.lake import order, ts

GROUPS = [[1, 2, 3, 4], [5, 6]]  # org_1 keys 1, 3 and 5 (a group alternates org_1, org_2)
GOOD = [order(1, "org_1", ts(1, 1), status="g1"), order(3, "org_1", ts(1, 1), status="g1"), order(5, "org_1", ts(1, 2), status="g2")]


def test_a_consistent_snapshot_counts_nothing() -> None:
    for kind in ("delta", "postgres", "object_storage"):
        assert +check_snapshot(kind, GOOD, ts(1, 2), GROUPS) == {}
    assert +check_snapshot("delta", GOOD[:2], ts(1, 1), GROUPS) == {}  # group 2 not transferred yet
    assert +check_snapshot("object_storage", [*GOOD, GOOD[0]], ts(1, 2), GROUPS) == {}  # a documented re-read


def test_each_fault_is_counted() -> None:
    rewritten_half = [order(1, "org_1", ts(1, 3), status="g3"), *GOOD[1:]]
    assert +check_snapshot("delta", rewritten_half, ts(1, 3), GROUPS) == {"partial_states": 1}
    assert +check_snapshot("delta", [GOOD[0], GOOD[2]], ts(1, 2), GROUPS) == {"partial_states": 1}
    assert +check_snapshot("postgres", [*GOOD, GOOD[2]], ts(1, 2), GROUPS) == {"duplicate_keys": 1}
    conflicting = [*GOOD, order(5, "org_1", ts(1, 2), status="other")]
    assert +check_snapshot("object_storage", conflicting, ts(1, 2), GROUPS)["duplicate_keys"] == 1
    assert +check_snapshot("delta", GOOD, ts(1, 5), GROUPS) == {"hw_ahead_of_data": 1}
    assert +check_snapshot("delta", [], ts(1, 5), GROUPS) == {"hw_ahead_of_data": 1}
    assert +check_snapshot("delta", [*GOOD, order(2, "org_2", ts(1, 1), status="g1")], ts(1, 2), GROUPS) == {"cross_tenant_rows": 1}

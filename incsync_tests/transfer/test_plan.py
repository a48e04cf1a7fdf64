"""Transfer plans, pure: spans from partitions, window attribution, batches by size."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from incsync.config.load import load_config
from incsync.core.bounds import to_micros
from incsync.destinations.registry import build_destination
from incsync.sources.registry import build_source
from incsync.transfer.plan import coalesce, count_by_window, plan_batches
from incsync.transfer.request import TransferRun
from incsync_tests.support.lake import lake_config, ts

DAY = timedelta(days=1)


@dataclass(frozen=True)
class Cell:
    recipient_id: str
    start: datetime
    end: datetime


def cell(recipient: str, day: int) -> Cell:
    return Cell(recipient, ts(day), ts(day) + DAY)


def test_contiguous_windows_of_a_recipient_form_one_span_and_gaps_split() -> None:
    cells = [cell("b", 3), cell("a", 2), cell("a", 1), cell("a", 4), cell("b", 4), cell("a", 5), cell("a", 2)]
    spans = coalesce(cells)
    assert [(s.recipient_id, [c.start.day for c in s.windows]) for s in spans] == [
        ("b", [3, 4]), ("a", [1, 2]), ("a", [4, 5]),
    ]
    assert (spans[0].start, spans[0].end) == (ts(3), ts(5))


def test_a_full_refresh_recipient_is_one_span_across_gaps() -> None:
    spans = coalesce([cell("a", 1), cell("a", 4), cell("b", 1), cell("b", 4)], whole_recipient=frozenset({"a"}))
    assert [(s.recipient_id, [c.start.day for c in s.windows]) for s in spans] == [("a", [1, 4]), ("b", [1]), ("b", [4])]


def test_a_runs_plan_is_one_transfer_per_recipients_contiguous_windows_named_whole(tmp_path) -> None:
    """A transfer carries its run, recipient, destination and windows, planned once from the run's
    partitions; a full refresh is one transfer per recipient, gaps included."""
    config = load_config(lake_config(tmp_path, recipients=[
        {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
        {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
    ]))
    model = config.model("orders")
    destinations = {r.id: build_destination(config.destination(r.destination)) for r in config.recipients}
    cells = [("acme", "2024-01-01"), ("globex", "2024-01-02"), ("acme", "2024-01-04"), ("acme", "2024-01-02")]

    def plan(full_refresh: bool) -> list[tuple[str, str, list[str]]]:
        run = TransferRun.for_model(config, model, source=build_source(config.source("lake")), spark=lambda: None,
                                    full_refresh=full_refresh)
        planned = run.plan([run.request(config.recipient(rid), destinations[rid], key) for rid, key in cells])
        assert all(t.run is run for t in planned.transfers) and planned.recipients == 2
        assert [r.partition.key for r in planned.requests] == [(w.window_key, t.recipient.id) for t in planned.transfers
                                                                for w in t.windows]
        return [(t.recipient.id, t.destination.name, [w.window_key for w in t.windows]) for t in planned.transfers]

    assert plan(full_refresh=False) == [("acme", "acme_delta", ["2024-01-01", "2024-01-02"]), ("acme", "acme_delta", ["2024-01-04"]),
                                        ("globex", "globex_delta", ["2024-01-02"])]
    assert plan(full_refresh=True) == [("acme", "acme_delta", ["2024-01-01", "2024-01-02", "2024-01-04"]),
                                       ("globex", "globex_delta", ["2024-01-02"])]


def test_rows_count_in_their_window_the_first_takes_the_lookback_overlap_the_last_what_lies_above() -> None:
    windows = [cell("a", 2), cell("a", 3), cell("a", 4)]
    values = [ts(1, 23, 59), ts(2), ts(2, 5), ts(3, 23, 59, 59, 999_999), ts(4, 1), ts(6)]
    counts = count_by_window(windows, [to_micros(v) for v in values], delta_after_micros=to_micros(ts(2, 5)))
    assert counts.rows == (3, 1, 2)
    assert counts.delta_rows == (0, 1, 2)
    assert counts.max_micros == (to_micros(ts(2, 5)), to_micros(ts(3, 23, 59, 59, 999_999)), to_micros(ts(6)))
    empty = count_by_window(windows, [], delta_after_micros=None)
    assert (empty.rows, empty.delta_rows, empty.max_micros) == ((0, 0, 0), (0, 0, 0), (None, None, None))


@pytest.mark.parametrize(
    ("rows", "cap", "expected"),
    [
        ([2, 1, 1, 0, 2], 2, [[0], [1, 2, 3], [4]]),
        ([0, 0, 0], 10, [[0, 1, 2]]),
        ([5, 0, 7], 3, [[0, 1], [2]]),  # a window larger than the cap is a batch of its own, never split
        ([1, 1, 1], 1_000_000, [[0, 1, 2]]),
    ],
    ids=["packs-in-order", "all-empty-one-record", "oversized-window", "default-cap"],
)
def test_batches_pack_whole_windows_in_order(rows: list[int], cap: int, expected: list[list[int]]) -> None:
    assert [list(r) for r in plan_batches(rows, cap)] == expected


@given(st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=40), st.integers(min_value=1, max_value=25))
def test_batches_cover_every_window_once_and_respect_the_cap(rows: list[int], cap: int) -> None:
    batches = plan_batches(rows, cap)
    assert [i for b in batches for i in b] == list(range(len(rows)))
    for b in batches:
        held = sum(rows[i] for i in b)
        assert held <= cap or len([i for i in b if rows[i]]) == 1

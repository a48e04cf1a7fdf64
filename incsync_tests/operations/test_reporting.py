"""What a model's run reports of its partitions (``operations.reporting``): materializations as commits
land, planned events only for spans that are slow or failed, never a window planned after it landed."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from incsync.core.windows import Window, WindowPartition
from incsync.operations.reporting import RunReporter

ASSET = dg.AssetKey(["app", "orders"])
DAY = datetime(2025, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class _Request:  # what the reporter reads of a TransferRequest
    partition: WindowPartition


def _requests(recipient: str, days: int) -> list[_Request]:
    out = []
    for d in range(days):
        start = DAY + timedelta(days=d)
        out.append(_Request(WindowPartition(Window(start, start + timedelta(days=1), start.date().isoformat()), recipient)))
    return out


def _key(request: _Request) -> str:
    return f"{request.partition.recipient_id}|{request.partition.window_key}"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Log:
    """The reports in the order the event log would store them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.batches: list[list[str]] = []

    def materialized(self, ms: list[dg.AssetMaterialization]) -> None:
        self.batches.append([str(m.partition) for m in ms])
        self.events += [("materialized", str(m.partition)) for m in ms]

    def planned(self, keys: list[str]) -> None:
        self.events += [("planned", k) for k in keys]


def _reporter(log: _Log, clock: _Clock, *, in_progress_after: float = 5.0, interval: float = 1.0) -> RunReporter:
    return RunReporter(log.materialized, log.planned, interval=interval, in_progress_after=in_progress_after, clock=clock)


def _commit(reporter: RunReporter, requests: list[_Request], transfer: str) -> None:
    for i, request in enumerate(requests):
        materialization = dg.AssetMaterialization(asset_key=ASSET, partition=_key(request), metadata={"rows_transferred": i})
        reporter.committed(request, (request.partition.recipient_id, transfer, None), materialization,
                           last_of_commit=i == len(requests) - 1)


def test_a_span_that_commits_quickly_costs_one_event_a_window() -> None:
    log, clock = _Log(), _Clock()
    reporter = _reporter(log, clock)
    acme, globex = _requests("acme", 3), _requests("globex", 2)
    reporter.started(acme)
    reporter.started(globex)
    clock.now += 4.9
    reporter.tick()
    _commit(reporter, acme, "t1")
    reporter.tick()
    _commit(reporter, globex, "t2")
    reporter.tick()
    clock.now += 60
    reporter.tick()
    assert log.events == [("materialized", _key(r)) for r in acme + globex]


def test_a_slow_span_plans_its_uncommitted_windows_once_and_before_they_land() -> None:
    log, clock = _Log(), _Clock()
    reporter = _reporter(log, clock)
    acme = _requests("acme", 4)
    reporter.started(acme)
    _commit(reporter, acme[:1], "t1")  # the first commit landed quickly
    clock.now += 5.0
    reporter.tick()
    reporter.tick()
    clock.now += 30
    reporter.tick()
    _commit(reporter, acme[1:], "t2")
    reporter.flush()
    assert log.events == [
        ("materialized", _key(acme[0])),
        *[("planned", _key(r)) for r in acme[1:]],
        *[("materialized", _key(r)) for r in acme[1:]],
    ]


def test_a_failed_span_plans_what_it_did_not_commit_so_the_run_shows_it_failed() -> None:
    log, clock = _Log(), _Clock()
    reporter = _reporter(log, clock)
    acme, globex = _requests("acme", 3), _requests("globex", 3)
    reporter.started(acme)
    reporter.started(globex)
    _commit(reporter, acme[:1], "t1")
    clock.now += 6
    reporter.tick()  # globex and acme's last two windows now show as in progress
    _commit(reporter, globex, "t2")
    reporter.failed(acme[1:] + _requests("initech", 1))  # acme failed; initech never started
    assert log.events == [
        ("materialized", _key(acme[0])),
        *[("planned", _key(r)) for r in acme[1:] + globex],
        *[("materialized", _key(r)) for r in globex],
        ("planned", "initech|2025-01-01"),  # acme's windows are planned already: not twice
    ]


def test_commits_are_handed_over_and_reported_by_the_next_tick_a_commits_windows_together() -> None:
    log, clock = _Log(), _Clock()
    reporter = _reporter(log, clock, interval=1.0)
    acme = _requests("acme", 5)
    reporter.started(acme)
    _commit(reporter, acme[:2], "t1")
    _commit(reporter, acme[2:3], "t2")
    assert log.batches == []  # the publish threads only hand commits over
    reporter.committed(acme[3], ("acme", "t3", "1/2"), dg.AssetMaterialization(asset_key=ASSET, partition=_key(acme[3])),
                       last_of_commit=False)
    reporter.tick()  # t1 and t2 go; t3 is still handing its windows over
    reporter.committed(acme[4], ("acme", "t3", "1/2"), dg.AssetMaterialization(asset_key=ASSET, partition=_key(acme[4])),
                       last_of_commit=True)
    reporter.tick()
    assert log.batches == [[_key(r) for r in acme[:3]], [_key(acme[3]), _key(acme[4])]]


def test_a_run_never_holds_more_landed_windows_than_its_bound_whatever_the_reporters_pace() -> None:
    """A reporter that falls behind (its clock never ticks here) does not make the run hold every
    landed window: past the bound, the next span to start reports the landed commits on its thread."""
    log, clock = _Log(), _Clock()
    reporter = RunReporter(log.materialized, log.planned, interval=3600, in_progress_after=60, max_waiting=10, clock=clock)
    spans = [_requests(f"r{i}", 4) for i in range(7)]
    for i, span in enumerate(spans):
        reporter.started(span)
        _commit(reporter, span, f"t{i}")
    # 3 commits (12 windows) pass the bound of 10: reported as the fourth span starts; then 3 more.
    assert [len(b) for b in log.batches] == [12, 12]
    reporter.flush()
    assert [len(b) for b in log.batches] == [12, 12, 4]
    assert sorted(k for _, k in log.events) == sorted(_key(r) for span in spans for r in span)


def test_a_span_past_the_bound_leaves_the_backlog_to_a_report_in_progress_until_twice_the_bound() -> None:
    """Publish threads do not queue behind one that stores the backlog (C200: 39 of 48 thread-seconds);
    past twice the bound they wait for it, so the run still holds a bounded number of windows."""
    storing, release, stored = threading.Event(), threading.Event(), []

    def slow(materializations):  # noqa: ANN001, ANN202
        storing.set()
        release.wait(10)
        stored.append(len(materializations))

    reporter = RunReporter(slow, lambda keys: None, interval=3600, in_progress_after=60, max_waiting=10, clock=_Clock())
    spans = [_requests(f"r{i}", 4) for i in range(10)]
    for i in range(3):
        reporter.started(spans[i])
        _commit(reporter, spans[i], f"t{i}")
    first = threading.Thread(target=reporter.started, args=(spans[3],))  # 12 > 10: it stores, slowly
    first.start()
    assert storing.wait(10)
    _commit(reporter, spans[3], "t3")
    for i in (4, 5, 6, 7, 8):  # 4 .. 20 landed since: never past twice the bound, so none waits
        reporter.started(spans[i])
        _commit(reporter, spans[i], f"t{i}")
    waiter = threading.Thread(target=reporter.started, args=(spans[9],))  # 24 landed: past 2 x 10, it waits
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    release.set()
    first.join(10)
    waiter.join(10)
    assert not waiter.is_alive() and stored == [12, 24]


def test_the_reporters_clock_reports_what_landed_while_the_run_goes_on() -> None:
    log = _Log()
    acme = _requests("acme", 2)
    with RunReporter(log.materialized, log.planned, interval=0.05, in_progress_after=60) as reporter:
        reporter.started(acme)
        _commit(reporter, acme, "t1")
        deadline = time.monotonic() + 10
        while not log.batches and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.batches == [[_key(r) for r in acme]]  # before the run ended
    assert log.events == [("materialized", _key(r)) for r in acme]


def test_a_run_that_breaks_off_shows_its_spans_at_work_failed_and_reports_what_landed() -> None:
    log, clock = _Log(), _Clock()
    acme, globex = _requests("acme", 2), _requests("globex", 2)
    with pytest.raises(RuntimeError), _reporter(log, clock) as reporter:
        reporter.started(acme)
        reporter.started(globex)
        _commit(reporter, globex, "t1")
        raise RuntimeError("the staging disk is full")
    assert log.events == [*[("materialized", _key(r)) for r in globex], *[("planned", _key(r)) for r in acme]]


def test_with_no_threshold_every_span_is_planned_as_it_starts() -> None:
    log, clock = _Log(), _Clock()
    reporter = _reporter(log, clock, in_progress_after=0)
    acme = _requests("acme", 2)
    reporter.started(acme)
    _commit(reporter, acme, "t1")
    reporter.flush()
    assert log.events == [*[("planned", _key(r)) for r in acme], *[("materialized", _key(r)) for r in acme]]


def test_a_commits_line_goes_to_the_run_log_with_its_windows_not_from_the_publish_thread() -> None:
    log, clock, lines = _Log(), _Clock(), []
    reporter = RunReporter(log.materialized, log.planned, interval=3600, in_progress_after=60, clock=clock, log=lines.append)
    acme = _requests("acme", 2)
    reporter.started(acme)
    reporter.committed(acme[0], ("acme", "t1", None), dg.AssetMaterialization(asset_key=ASSET, partition=_key(acme[0])),
                       last_of_commit=False, line="transfer t1 committed 5 rows of recipient acme")
    reporter.committed(acme[1], ("acme", "t1", None), dg.AssetMaterialization(asset_key=ASSET, partition=_key(acme[1])),
                       last_of_commit=True)
    assert lines == []  # handed over only
    reporter.tick()
    assert lines == ["transfer t1 committed 5 rows of recipient acme"]
    assert log.batches == [[_key(r) for r in acme]]


def test_the_commits_of_one_report_are_one_line_of_the_run_log() -> None:
    """One event per report, not per commit: a run of 1,000 recipients logged 1,000 events."""
    log, clock, lines = _Log(), _Clock(), []
    reporter = RunReporter(log.materialized, log.planned, interval=3600, in_progress_after=60, clock=clock, log=lines.append)
    spans = {rid: _requests(rid, 1) for rid in ("acme", "globex", "initech")}
    for n, (rid, requests) in enumerate(spans.items(), start=1):
        reporter.started(requests)
        reporter.committed(requests[0], (rid, f"t{n}", None), dg.AssetMaterialization(asset_key=ASSET, partition=_key(requests[0])),
                           last_of_commit=True, line=f"transfer t{n} committed {n} rows of recipient {rid}")
    reporter.tick()
    assert lines == ["3 commits landed:\ntransfer t1 committed 1 rows of recipient acme\n"
                     "transfer t2 committed 2 rows of recipient globex\ntransfer t3 committed 3 rows of recipient initech"]
    reporter.tick()
    assert len(lines) == 1

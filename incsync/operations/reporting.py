"""What a model's run tells Dagster about its partitions while it runs: at most one stored event per
(window × recipient) partition in the common case.

- A committed window: its materialization with its exact metadata, reported with the rest of its
  commit at most ``REPORT_INTERVAL_SECONDS`` after it landed (one batch in the event log).
- A span still at work after ``IN_PROGRESS_AFTER_SECONDS``: its uncommitted windows are planned, which
  Dagster's partition status shows as in progress (then materialized, or failed if the run fails).
- A span that failed: its uncommitted windows are planned before the run fails, so they show as failed.

Most windows of a backfill are empty and commit within a second of their span's start; planning every
partition when the run started (Dagster's own way) would double their events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

import dagster as dg

from incsync.operations.dagster_compat import materialization_reporter, refresh_partition_status, report_planned
from incsync.operations.partitions import dagster_key
from incsync.transfer.request import TransferRequest

# How often a run reports the commits that landed since its last report: each report is one batch in
# the event log. A fan-out run of many recipients lands commits faster than the event log stores them
# one batch each: a batch per commit would cost as much time as the publishes themselves.
REPORT_INTERVAL_SECONDS = 1.0
# A span at work for this long shows its windows as in progress. 0: every span, as it starts.
IN_PROGRESS_AFTER_SECONDS = 5.0
# Landed windows a run holds for its reporter: past this, a span that starts reports them on its own
# thread first (outside the commit path, whose lock the publish threads share), unless another thread is
# reporting already; past twice this, it waits for that report. So a run holds at most twice this many
# materializations waiting to be stored, whatever the storage's pace: a reporter that falls behind would
# otherwise hold a whole backfill's in memory.
MAX_WAITING_WINDOWS = 5_000


class _Span:
    __slots__ = ("planned", "started", "waiting")

    def __init__(self, started: float, requests: Iterable[TransferRequest]) -> None:
        self.started = started
        self.waiting = {r.partition.key: r for r in requests}  # its windows not committed yet, in order
        self.planned = False


Commit = tuple[str, str, "str | None"]  # recipient, transfer id, batch


class RunReporter:
    """Reports a run's commits and its slow and failed spans from its own thread, so the publish
    threads only hand commits over (serializing and storing events is work of its own for every window).

    Decisions are taken under one lock and reported, in order, under another: a window planned after
    its materialization was stored would show as failed."""

    def __init__(
        self,
        materialized: Callable[[list[dg.AssetMaterialization]], None],
        planned: Callable[[list[str]], None],
        *,
        interval: float | None = None,
        in_progress_after: float | None = None,
        max_waiting: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] | None = None,
        closed: Callable[[], None] | None = None,
    ) -> None:
        self._materialized, self._planned, self._clock = materialized, planned, clock
        self._closed = closed  # once everything is reported, however the run ends
        self._log = log or (lambda _line: None)
        self._lines: list[str] = []  # the run log's lines about landed commits, written with their windows
        self._interval = REPORT_INTERVAL_SECONDS if interval is None else interval
        self._in_progress_after = IN_PROGRESS_AFTER_SECONDS if in_progress_after is None else in_progress_after
        self._max_waiting = MAX_WAITING_WINDOWS if max_waiting is None else max_waiting
        self._waiting = 0  # landed windows not reported yet
        self._state = threading.Lock()  # the spans and the commits handed over
        self._reporting = threading.Lock()  # one report at a time, in the order decided
        self._spans: dict[tuple[str, str], _Span] = {}  # a waiting window's partition key -> its span
        self._unplanned: dict[int, _Span] = {}  # spans with waiting windows, not planned: what a tick looks at
        self._open: dict[Commit, list[dg.AssetMaterialization]] = {}
        self._ready: list[dg.AssetMaterialization] = []
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @classmethod
    def for_output(cls, context: dg.OutputContext) -> RunReporter:
        step, key = context.step_context, context.asset_key
        return cls(materialization_reporter(context), lambda keys: report_planned(step, key, keys), log=context.log.info,
                   closed=lambda: refresh_partition_status(context))

    def __enter__(self) -> RunReporter:
        self._ticker = threading.Thread(target=self._tick_until_stopped, name="incsync-run-reporter", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        # Whatever committed is reported, however the run ends; the spans at work when it broke off
        # show as failed.
        self._report(commits_in_flight=True, due=lambda span: exc_type is not None)
        if self._closed is not None:
            self._closed()

    def started(self, requests: Sequence[TransferRequest]) -> None:
        """A span's work started (``transfer.execute``'s ``on_start``). When the run holds
        ``max_waiting`` landed windows for the reporter already, this thread reports them first."""
        span = _Span(self._clock(), requests)
        with self._state:
            waiting = self._waiting
        if waiting > self._max_waiting:
            # Past twice the bound, wait for a report in progress; else leave the backlog to it and go on
            # publishing (publish threads waiting on the one that stores would idle for most of a run).
            self._report(commits_in_flight=False, due=lambda span: False, wait=waiting > 2 * self._max_waiting)
        with self._state:
            for key in span.waiting:
                self._spans[key] = span
            if span.waiting:
                self._unplanned[id(span)] = span
        if self._in_progress_after <= 0:
            self.tick()

    def committed(self, request: TransferRequest, commit: Commit, materialization: dg.AssetMaterialization, *,
                  last_of_commit: bool, line: str | None = None) -> None:
        """A window landed: handed over, reported with its commit's other windows by the next tick, and
        ``line`` with them in the run's log (each line is an event of its own in the event log: written
        by the publish thread, the others waited for it)."""
        key = request.partition.key
        with self._state:
            if line is not None:
                self._lines.append(line)
            span = self._spans.pop(key, None)
            if span is not None:
                span.waiting.pop(key, None)
                if not span.waiting:
                    self._unplanned.pop(id(span), None)
            self._open.setdefault(commit, []).append(materialization)
            if last_of_commit:
                self._ready += self._open.pop(commit)
            self._waiting += 1

    def failed(self, requests: Iterable[TransferRequest]) -> None:
        """Windows the run did not commit: planned (unless they already are), so they show as failed."""
        with self._reporting:
            with self._state:
                ready = self._take(commits_in_flight=True)
                keys = []
                for request in requests:
                    span = self._spans.get(request.partition.key)
                    if span is None or not span.planned:
                        keys.append(str(dagster_key(request.partition)))
            self._send(ready, keys)

    def flush(self) -> None:
        self._report(commits_in_flight=True, due=lambda span: False)

    def tick(self) -> None:
        """Report the commits that landed; plan the spans at work for ``in_progress_after``."""
        now = self._clock()
        self._report(commits_in_flight=False, due=lambda span: now - span.started >= self._in_progress_after)

    def _tick_until_stopped(self) -> None:
        while not self._stop.wait(max(self._interval, 0.05)):
            self.tick()

    def _report(self, *, commits_in_flight: bool, due: Callable[[_Span], bool], wait: bool = True) -> None:
        """Report what is ready; ``wait=False``: nothing when another thread is reporting already."""
        if not self._reporting.acquire(blocking=wait):
            return
        try:
            self._report_held(commits_in_flight=commits_in_flight, due=due)
        finally:
            self._reporting.release()

    def _report_held(self, *, commits_in_flight: bool, due: Callable[[_Span], bool]) -> None:
        """``_report``'s work, under ``_reporting``."""
        with self._state:
            ready = self._take(commits_in_flight=commits_in_flight)
            # the spans at work, not every waiting window: a tick costs what runs, not the run's size
            spans = [s for s in self._unplanned.values() if due(s)]
            keys = []
            for span in spans:
                span.planned = True
                del self._unplanned[id(span)]
                keys += [str(dagster_key(r.partition)) for r in span.waiting.values()]
        self._send(ready, keys)

    def _take(self, *, commits_in_flight: bool) -> list[dg.AssetMaterialization]:
        """The landed commits' windows; those of a commit still handing its windows over only with
        ``commits_in_flight`` (the run's end, a failure), so a commit's windows stay one batch."""
        ready, self._ready = self._ready, []
        if commits_in_flight:
            ready += [m for ms in self._open.values() for m in ms]
            self._open = {}
        self._waiting -= len(ready)
        return ready

    def _send(self, materialized: list[dg.AssetMaterialization], planned: list[str]) -> None:
        with self._state:
            lines, self._lines = self._lines, []
        if lines:  # ONE event for the report's commits: each event is a write, and a line a commit would keep
            # the reporter of a run of many recipients busy for most of the run
            self._log(lines[0] if len(lines) == 1 else f"{len(lines)} commits landed:\n" + "\n".join(lines))
        if materialized:
            self._materialized(materialized)
        if planned:
            self._planned(planned)

"""What a model's run tells Dagster about its partitions while it runs: at most one stored event per
(window × recipient) partition in the common case.

- A committed window: its materialization with its exact metadata, reported with the rest of its
  commit at most ``REPORT_INTERVAL_SECONDS`` after it landed (one batch in the event log).
- A span still at work after ``IN_PROGRESS_AFTER_SECONDS``: its uncommitted windows are planned, which
  Dagster's partition status shows as in progress (then materialized, or failed if the run fails).
- A span that failed: its uncommitted windows are planned before the run fails, so they show as failed.

Most windows of a backfill are empty and commit within a second of their span's start; planning every
partition when the run started (Dagster's own way, and incsync's before issue 29) doubled their events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

import dagster as dg

from incsync.orchestration.dagster_compat import report_materialized, report_planned
from incsync.orchestration.partitions import dagster_key
from incsync.transfer.request import TransferRequest

# How often a run reports the commits that landed since its last report: each report is one batch in
# the event log. A fan-out run of 256 recipients lands a commit every few tenths of a second, and a
# batch per commit cost as much time as the publishes themselves (S benchmark, November 2026).
REPORT_INTERVAL_SECONDS = 1.0
# A span at work for this long shows its windows as in progress. 0: every span, as it starts.
IN_PROGRESS_AFTER_SECONDS = 5.0


class _Span:
    __slots__ = ("started", "waiting", "planned")

    def __init__(self, started: float, keys: Iterable[str]) -> None:
        self.started = started
        self.waiting = dict.fromkeys(keys)  # its windows not committed yet, in order
        self.planned = False


class RunReporter:
    """Reports a run's commits and its slow and failed spans; thread-safe (publish threads, its clock).

    One lock orders every report, so a window's planned event is never stored after its
    materialization: a window planned after it committed would show as failed."""

    def __init__(
        self,
        materialized: Callable[[list[dg.AssetMaterialization]], None],
        planned: Callable[[list[str]], None],
        *,
        interval: float | None = None,
        in_progress_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._materialized, self._planned, self._clock = materialized, planned, clock
        self._interval = REPORT_INTERVAL_SECONDS if interval is None else interval
        self._in_progress_after = IN_PROGRESS_AFTER_SECONDS if in_progress_after is None else in_progress_after
        self._lock = threading.Lock()
        self._spans: dict[str, _Span] = {}  # window partition key -> its span, while it waits
        self._open: dict[tuple[str, str, str | None], list[dg.AssetMaterialization]] = {}
        self._ready: list[dg.AssetMaterialization] = []
        self._reported_at = clock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @classmethod
    def for_output(cls, context: dg.OutputContext) -> RunReporter:
        step, key = context.step_context, context.asset_key
        return cls(lambda ms: report_materialized(context, ms), lambda keys: report_planned(step, key, keys))

    def __enter__(self) -> RunReporter:
        self._ticker = threading.Thread(target=self._tick_until_stopped, name="incsync-run-reporter", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._flush()  # whatever committed is reported, however the run ends
            if exc_type is not None:  # the spans at work when the run broke off show as failed
                self._plan(list({id(s): s for s in self._spans.values() if not s.planned}.values()))

    def started(self, requests: Sequence[TransferRequest]) -> None:
        """A span's work started (``transfer.execute``'s ``on_start``)."""
        span = _Span(self._clock(), (str(dagster_key(r.partition)) for r in requests))
        with self._lock:
            for key in span.waiting:
                self._spans[key] = span
            if self._in_progress_after <= 0:
                self._plan([span])

    def committed(self, commit: tuple[str, str, str | None], materialization: dg.AssetMaterialization, *,
                  last_of_commit: bool) -> None:
        """A window landed; its commit's windows are reported together, at most every ``interval``."""
        key = str(materialization.partition)
        with self._lock:
            span = self._spans.pop(key, None)
            if span is not None:
                span.waiting.pop(key, None)
            self._open.setdefault(commit, []).append(materialization)
            if last_of_commit:
                self._ready += self._open.pop(commit)
                if self._clock() - self._reported_at >= self._interval:
                    self._flush(commits_in_flight=False)

    def failed(self, requests: Iterable[TransferRequest]) -> None:
        """Windows the run did not commit: planned (unless they already are), so they show as failed."""
        keys = [str(dagster_key(r.partition)) for r in requests]
        with self._lock:
            self._flush()
            spans = {id(s): s for k in keys if (s := self._spans.get(k)) is not None}
            unplanned = [k for k in keys if k not in self._spans or not self._spans[k].planned]
            for span in spans.values():
                span.planned = True
            if unplanned:
                self._planned(unplanned)

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def tick(self) -> None:
        """Plan the spans at work for ``in_progress_after``, report the commits that landed."""
        now = self._clock()
        with self._lock:
            due = {id(s): s for s in self._spans.values() if not s.planned and now - s.started >= self._in_progress_after}
            self._flush(commits_in_flight=False)
            self._plan(list(due.values()))

    def _tick_until_stopped(self) -> None:
        while not self._stop.wait(max(self._interval, 0.05)):
            self.tick()

    def _plan(self, spans: list[_Span]) -> None:
        keys = [key for span in spans for key in span.waiting]
        for span in spans:
            span.planned = True
        if keys:
            self._planned(keys)

    def _flush(self, *, commits_in_flight: bool = True) -> None:
        """Report the landed commits' windows; those of a commit still handing its windows over only
        with ``commits_in_flight`` (the run's end, a failure), so a commit's windows stay one batch."""
        pending = self._ready
        self._ready = []
        if commits_in_flight:
            pending += [m for ms in self._open.values() for m in ms]
            self._open = {}
        if pending:
            self._materialized(pending)
        self._reported_at = self._clock()

"""The transfer invariants, proved by a hypothesis state machine against a pure-Python reference.

A real lake source (Parquet written with pyarrow, read by Spark) feeds real Delta destinations. The
machine interleaves source changes (inserts, forward updates, late rows, rows dated ahead of the clock,
sub-second and on-boundary timestamps, rows sharing a timestamp) with transfers (scheduled ticks of the
open window, backfills of random window sets in random order, re-runs, full refreshes, runs that must
fail) under a controlled clock, and writers whose transactions open early and commit late (the safe
horizon). After every step the destination must equal what the reference says (docs/design.md#one-transfer).

Most transfers call the engine directly (``run_transfer``, the code the IO manager runs); about one
in four goes through Dagster (asset + IO manager) so that path is proved too.

Profiles: the fast one runs in ``make test``; ``make test-long`` with
``INCSYNC_HYPOTHESIS_PROFILE=long`` runs thousands of steps (last result: docs/invariants.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from incsync.config.load import load_config
from incsync.config.tags import FULL_REFRESH_TAG, MODE_TAG
from incsync.core.horizon import LOOKBACK_ONLY, TRANSACTIONS, SourceHorizon
from incsync.core.windows import grid_start, window_key_for
from incsync.destinations.registry import build_destination
from incsync.errors import ValidationError
from incsync.sources.lake import LakeSource
from incsync.transfer.execute import execute, run_transfer
from incsync.transfer.request import Transfer, TransferRequest, TransferRun
from incsync_tests.support.lake import JAN1_EPOCH, ORDERS_SCHEMA, latest_metadata, materialize_partition

UTC = timezone.utc
S = 1_000_000  # microseconds per second: the reference keeps every timestamp as integer µs
WINDOW = 3600 * S
LOOKBACK = 300 * S
MIN_START = (JAN1_EPOCH + 600) * S  # model start, 10 min before the first window boundary
GRID0 = (JAN1_EPOCH + 3600) * S  # the first window of the grid starts at the next boundary
MAX_SPAN = 5 * WINDOW  # the clock stays within a few windows so catch-ups stay cheap
TENANTS = {"acme": "org_1", "globex": "org_2"}  # org_3 has rows but no recipient
RECIPIENT_START = {"acme": MIN_START, "globex": GRID0 + 2 * WINDOW + 1234 * S}
PROFILE_ENV = "INCSYNC_HYPOTHESIS_PROFILE"
HORIZON_LAG = WINDOW  # max_horizon_lag of the machine's source: an older open transaction stops holding the HW
VIA = st.sampled_from(["engine"] * 5 + ["dagster"])  # a Dagster run costs ~2.5 s, a direct transfer ~0.4 s

settings.register_profile(
    "fast",
    max_examples=8,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.register_profile(
    "long",
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def run_windows(instance: Any, run_id: str) -> list[dict[str, Any]]:
    """The metadata of every window a run materialized (its newest materializations, read back until another run's)."""
    import dagster as dg

    out = []
    for record in instance.fetch_materializations(dg.AssetKey(["lake", "orders"]), limit=10_000, ascending=False).records:
        if record.event_log_entry.run_id != run_id:
            break
        out.append({k: v.value for k, v in record.asset_materialization.metadata.items()})
    return out


def dt(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def us(value: datetime) -> int:
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * S + delta.microseconds


def window_of(t: int) -> int:
    return t // WINDOW * WINDOW


def floor_second(t: int) -> int:
    return t // S * S


# --------------------------------------------------------------------------------------------------
# The reference: what docs/design.md#one-transfer says one transfer does, written again from the text, on plain dicts.
# --------------------------------------------------------------------------------------------------

Row = tuple[str, str, float, int]  # organization_id, status, amount, updated_at (µs)


@dataclass
class Expected:
    lower: int
    upper: int
    rows: int
    delta_rows: int
    high_watermark: int | None
    full_refresh: bool


@dataclass
class ReferenceDestination:
    """One recipient's destination as the design says it must be."""

    rows: dict[int, Row] = field(default_factory=dict)
    high_watermark: int | None = None
    transferred: bool = False  # a transfer record exists (an empty batch records one with no HW)

    def resyncs(self, *, start_r: int, window: int, scheduled: bool) -> bool:
        """A schedule tick that finds no transfer record past the recipient's first window re-syncs from its start."""
        first = (window <= start_r) or (start_r < GRID0 and window == GRID0)
        return scheduled and not self.transferred and not first

    def bounds(
        self, *, start_r: int, window: int, scheduled: bool, full_refresh: bool, last_window: int | None = None
    ) -> tuple[int, int]:
        """The bounds of one transfer over the contiguous windows ``window`` .. ``last_window``."""
        s, e = window, (window if last_window is None else last_window) + WINDOW
        if full_refresh or self.resyncs(start_r=start_r, window=window, scheduled=scheduled):
            # reload from the recipient's start to the end of the (wall clock's) open window
            return start_r, max(e, (time.time_ns() // 1000 // WINDOW + 1) * WINDOW)
        first = (s <= start_r < e) or (start_r < GRID0 and s == GRID0)
        hw = self.high_watermark
        if scheduled and hw is not None and s <= hw < e:
            lower = max(floor_second(hw) - LOOKBACK, s - LOOKBACK)
        elif scheduled and hw is not None and hw < s:  # windows after the HW: what changed since it
            lower = floor_second(hw) - LOOKBACK
        elif first:
            lower = start_r
        else:
            lower = s - LOOKBACK
        return min(max(lower, start_r), e), e

    def transfer(
        self, source: dict[int, Row], *, tenant: str, start_r: int, window: int, scheduled: bool, full_refresh: bool,
        last_window: int | None = None,
        cap: int | None = None,
    ) -> Expected:
        full_refresh = full_refresh or self.resyncs(start_r=start_r, window=window, scheduled=scheduled)
        lower, upper = self.bounds(
            start_r=start_r, window=window, scheduled=scheduled, full_refresh=full_refresh, last_window=last_window
        )
        batch = {k: r for k, r in source.items() if r[0] == tenant and lower <= r[3] < upper}
        previous = None if full_refresh else self.high_watermark
        threshold = None if previous is None else floor_second(previous)
        delta = sum(1 for r in batch.values() if threshold is None or r[3] > threshold)
        batch_max = max((r[3] for r in batch.values()), default=None)
        if batch_max is not None and cap is not None:
            batch_max = min(batch_max, cap)  # the safe horizon: never past an open transaction's start, nor now
        candidates = [t for t in (previous, batch_max) if t is not None]
        hw = max(candidates) if candidates else None
        if full_refresh:
            self.rows = dict(batch)
        else:
            for key, row in batch.items():
                old = self.rows.get(key)
                if old is None or row[3] >= old[3]:  # replaced only by a newer or equal last-modified
                    self.rows[key] = row
        self.high_watermark = hw
        self.transferred = True
        return Expected(lower, upper, len(batch), delta, hw, full_refresh)

    def peek(self, source: dict[int, Row], **kwargs: Any) -> Expected:
        copy = ReferenceDestination(rows=dict(self.rows), high_watermark=self.high_watermark, transferred=self.transferred)
        return copy.transfer(source, **kwargs)


# --------------------------------------------------------------------------------------------------
# The machine.
# --------------------------------------------------------------------------------------------------


def write_config(root: Path) -> Path:
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": "./src", "format": "parquet", "lookback_seconds": LOOKBACK // S}],
        "destinations": [{"name": f"{rid}_delta", "kind": "delta", "path": f"./out/{rid}"} for rid in TENANTS],
        "models": [
            {
                "model_name": "orders",
                "source": "lake",
                "source_table": "orders",
                "columns": ["id", "organization_id", "status", "amount", "updated_at"],
                "primary_key": ["id"],
                "last_modified_column": "updated_at",
                "organization_column": "organization_id",
                "max_transfer_time_window_seconds": WINDOW // S,
                "min_start_time_epoch": MIN_START // S,
            }
        ],
        "recipients": [
            {
                "id": rid,
                "id_in_provider_system": org,
                "destination": f"{rid}_delta",
                **({"default_full_refresh_min_start_time_epoch": RECIPIENT_START[rid] // S} if RECIPIENT_START[rid] != MIN_START else {}),
            }
            for rid, org in TENANTS.items()
        ],
        "staging_dir": "./staging",
    }
    path = root / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class OpenTransaction:
    """A writer's transaction: rows dated at its start, invisible to every read until it commits."""

    start: int
    rows: dict[int, Row]
    outlived_lag: bool = False  # a transfer ran while it was older than HORIZON_LAG: its rows are the lookback's


class MachineLake(LakeSource):
    """The real lake source, whose clock and open transactions are the machine's (a lake has neither)."""

    def __init__(self, config: Any, machine: TransferMachine):
        super().__init__(config)
        self.machine = machine

    def horizon(self, spark: Any, *, model: Any, recipient: Any) -> SourceHorizon:
        now = self.machine.now
        starts = [t.start for t in self.machine.open_txns]
        held = [s for s in starts if now - s <= HORIZON_LAG]
        return SourceHorizon(
            extraction_start=dt(now), mode=TRANSACTIONS if starts else LOOKBACK_ONLY,
            oldest_open=dt(min(starts)) if starts else None, oldest_within_lag=dt(min(held)) if held else None,
            max_lag_seconds=HORIZON_LAG // S,
        )


class TransferMachine(RuleBasedStateMachine):
    """Source changes and transfers in any order; the destination must always match the reference."""

    spark: Any = None
    instance: Any = None
    scratch: Path | None = None
    stats: dict[str, int] = {}

    def __init__(self) -> None:
        super().__init__()
        assert self.scratch is not None
        self.root = Path(tempfile.mkdtemp(prefix="machine-", dir=self.scratch))
        self.config_path = write_config(self.root)
        self.config = load_config(self.config_path)
        self.model = self.config.models[0]
        assert us(grid_start(self.model)) == GRID0
        self.source = MachineLake(self.config.source("lake"), self)
        self.destinations = {r.id: build_destination(self.config.destination(r.destination)) for r in self.config.recipients}
        self.recipients = {r.id: r for r in self.config.recipients}
        self.staging = Path(self.config.staging_dir or "")
        self.defs = None  # Dagster definitions, built on first use
        self.now = GRID0
        self.next_id = 1
        self.source_rows: dict[int, Row] = {}
        self.bad_rows: list[dict[str, Any]] = []
        self.reference = {rid: ReferenceDestination() for rid in TENANTS}
        self.last_tick: dict[str, int | None] = {rid: None for rid in TENANTS}
        self.last_request: dict[str, tuple[int, bool, bool] | None] = {rid: None for rid in TENANTS}
        self.file_no = 0
        self.open_txns: list[OpenTransaction] = []
        self.late_rows: list[tuple[str, int, list[int]]] = []  # (recipient, txn start, keys) the next tick must bring

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- the lake source --------------------------------------------------------------------------

    def write_source(self) -> None:
        rows = [
            {"id": k, "organization_id": r[0], "status": r[1], "amount": r[2], "updated_at": dt(r[3])}
            for k, r in sorted(self.source_rows.items())
        ] + self.bad_rows
        folder = self.root / "src" / "orders"
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.parquet"):
            old.unlink()
        self.file_no += 1  # a new file name each time: no reader may see a cached footer
        pq.write_table(pa.Table.from_pylist(rows, schema=ORDERS_SCHEMA), folder / f"part-{self.file_no:05d}.parquet")

    def add_row(self, tenant: str, t: int) -> int:
        key, self.next_id = self.next_id, self.next_id + 1
        self.source_rows[key] = (tenant, "v0", key * 0.5, t)
        return key

    def candidate_times(self, *, not_before: int = 0) -> list[int]:
        """Timestamps worth trying: now, sub-second and boundary values, late rows in and beyond the lookback,
        and rows dated ahead of the clock (in the open window and in the next one)."""
        now, s = self.now, window_of(self.now)
        times = {now, now - 1, floor_second(now), floor_second(now) - 1, s, s - 1, s - LOOKBACK, now - LOOKBACK, now - LOOKBACK - 1}
        for ref in self.reference.values():
            if ref.high_watermark is not None:
                hw = ref.high_watermark
                times |= {hw, hw + 1, floor_second(hw), floor_second(hw) - LOOKBACK, floor_second(hw) - LOOKBACK - 1}
        past = sorted(t for t in times if max(not_before, JAN1_EPOCH * S) <= t <= now)
        return past + sorted(t for t in self.ahead_times() if t >= not_before)

    def ahead_times(self) -> set[int]:
        """Dated after now: 1 µs and 1 s ahead, the open window's last µs, the next window's first."""
        end = window_of(self.now) + WINDOW
        return {self.now + 1, self.now + S, end - 1, end} - {self.now}

    # ---- transfers -------------------------------------------------------------------------------

    def windows(self, rid: str) -> list[int]:
        """Every window of the grid up to the open one."""
        return list(range(GRID0, window_of(self.now) + WINDOW, WINDOW))

    def run(
        self, rid: str, window: int, *, scheduled: bool = False, full_refresh: bool = False, via: str = "engine",
        last_window: int | None = None,
    ) -> None:
        """Run one transfer (over ``window`` .. ``last_window``) for real and in the reference; they must agree."""
        self.last_request[rid] = (window, scheduled, full_refresh)
        if self.open_txns or any(r[3] > self.now for r in self.source_rows.values()):
            via = "engine"  # Dagster builds its own lake source, which knows neither the machine's transactions nor its clock
        self.count(via)
        ref = self.reference[rid]
        cap = self.safe_horizon()
        expected = ref.peek(
            self.source_rows, tenant=TENANTS[rid], start_r=RECIPIENT_START[rid], window=window,
            scheduled=scheduled, full_refresh=full_refresh, last_window=last_window, cap=cap,
        )
        window_key = window_key_for(self.model, dt(window))
        if last_window is not None and last_window != window:
            self.count("coalesced")
            keys = [window_key_for(self.model, dt(w)) for w in range(window, last_window + WINDOW, WINDOW)]
            outcomes = self.execute({rid: keys}, scheduled=scheduled, full_refresh=full_refresh)[rid]
            given = [dt(w).isoformat() for w in range(window, last_window + WINDOW, WINDOW)]
            windows = [o.record.window_start for o in outcomes]
            if expected.full_refresh:  # every window of the recipient's span (docs/design.md#the-partition-view)
                assert set(given) <= set(windows) and windows == sorted(set(windows))
                assert windows[0] == dt(window_of(max(RECIPIENT_START[rid], GRID0))).isoformat()
            else:
                assert windows == given
            assert {(us(o.bounds.lower), us(o.bounds.upper)) for o in outcomes} == {(expected.lower, expected.upper)}
            assert sum(o.record.rows_transferred for o in outcomes) == expected.rows
            assert sum(o.record.delta_rows_transferred for o in outcomes) == expected.delta_rows
            assert len({o.record.transfer_id for o in outcomes}) == 1
        elif via == "dagster":
            result = materialize_partition(self.dagster_defs(), self.instance, window=window_key, recipient=rid, tags=self.tags(scheduled, full_refresh))
            assert result.success
            meta = latest_metadata(self.instance)  # with its commit's record
            assert meta["recipient"] == rid
            own = run_windows(self.instance, result.run_id)  # a full refresh records every window of its span
            assert sum(m["rows_transferred"] for m in own) == expected.rows
            assert sum(m["delta_rows_transferred"] for m in own) == expected.delta_rows
            hw_epoch = None if expected.high_watermark is None else expected.high_watermark // S
            assert meta["high_watermark_epoch_seconds"] == hw_epoch
            assert meta["transfer_type"] == ("FULL_REFRESH" if expected.full_refresh else "INCREMENTAL")
            assert (meta["lower_bound"], meta["upper_bound"]) == (expected.lower / S, expected.upper / S)
        else:
            outcome = run_transfer(self.request(rid, window_key, scheduled=scheduled, full_refresh=full_refresh), staging_root=self.staging)
            assert (us(outcome.bounds.lower), us(outcome.bounds.upper)) == (expected.lower, expected.upper)
        record = self.destinations[rid].read_state(model=self.model, recipient=self.recipients[rid]).last_transfer
        assert record is not None
        got = (us(datetime.fromisoformat(record.lower_bound)), record.rows_transferred, record.delta_rows_transferred, record.high_watermark_micros)
        assert got == (expected.lower, expected.rows, expected.delta_rows, expected.high_watermark), (
            f"{rid} window {window_key} scheduled={scheduled} full_refresh={full_refresh}: engine {got} != reference "
            f"{(expected.lower, expected.rows, expected.delta_rows, expected.high_watermark)}"
        )
        ref.transfer(
            self.source_rows, tenant=TENANTS[rid], start_r=RECIPIENT_START[rid], window=window,
            scheduled=scheduled, full_refresh=full_refresh, last_window=last_window, cap=cap,
        )

    def execute(self, keys: dict[str, list[str]], *, scheduled: bool = False, full_refresh: bool = False) -> dict[str, list[Any]]:
        """One run of several (window, recipient) partitions through the transfer plan; outcomes by recipient."""
        run = self.transfer_run(scheduled=scheduled, full_refresh=full_refresh)
        requests = [run.request(self.recipients[rid], self.destinations[rid], k) for rid, ks in keys.items() for k in ks]
        outcomes: dict[str, list[Any]] = {rid: [] for rid in keys}
        failures = execute(run.plan(requests), staging_root=self.staging, on_commit=lambda r, o: outcomes[r.recipient.id].append(o))
        assert not failures, failures
        return outcomes

    def safe_horizon(self) -> int:
        """docs/design.md#safe-horizon, from the text: now, or the oldest open transaction's start unless older than the lag."""
        held = [t.start for t in self.open_txns if self.now - t.start <= HORIZON_LAG]
        for t in self.open_txns:
            t.outlived_lag |= self.now - t.start > HORIZON_LAG
        return min([self.now, *held])

    def transfer_run(self, *, scheduled: bool, full_refresh: bool) -> TransferRun:
        """The run the asset builds (assets.py), built here so most steps skip Dagster's overhead."""
        return TransferRun.for_model(
            self.config, self.model, source=self.source, spark=lambda: self.spark, scheduled=scheduled, full_refresh=full_refresh,
        )

    def request(self, rid: str, window_key: str, *, scheduled: bool, full_refresh: bool) -> TransferRequest:
        """One partition's request, as the asset builds it."""
        return self.transfer_run(scheduled=scheduled, full_refresh=full_refresh).request(self.recipients[rid], self.destinations[rid], window_key)

    @staticmethod
    def tags(scheduled: bool, full_refresh: bool) -> dict[str, str]:
        tags = {MODE_TAG: "incremental"} if scheduled else {}
        if full_refresh:
            tags[FULL_REFRESH_TAG] = "true"
        return tags

    def dagster_defs(self) -> Any:
        if self.defs is None:
            # incsync.definitions builds `defs` from $INCSYNC_CONFIG when first imported.
            previous = os.environ.get("INCSYNC_CONFIG")
            os.environ["INCSYNC_CONFIG"] = str(self.config_path)
            try:
                from incsync.definitions import build_definitions
            finally:
                if previous is None:
                    os.environ.pop("INCSYNC_CONFIG")
                else:
                    os.environ["INCSYNC_CONFIG"] = previous
            self.defs = build_definitions(self.config_path)
        return self.defs

    def visible(self, rid: str) -> tuple[dict[int, Row], Any]:
        """What a reader of the recipient's Delta table sees, and the destination's state."""
        dest = self.destinations[rid]
        table = dest.read_rows(model=self.model, recipient=self.recipients[rid])
        rows = {}
        for r in table.to_pylist():
            assert r["id"] not in rows, f"{rid}: key {r['id']} twice in the destination"
            rows[r["id"]] = (r["organization_id"], r["status"], r["amount"], us(r["updated_at"]))
        return rows, dest.read_state(model=self.model, recipient=self.recipients[rid])

    # ---- rules: the source -----------------------------------------------------------------------

    @initialize(offset=st.integers(0, WINDOW - 1), history=st.lists(st.tuples(st.sampled_from(["org_1", "org_2", "org_3"]), st.integers(0, 2 * WINDOW)), max_size=12))
    def start(self, offset: int, history: list[tuple[str, int]]) -> None:
        """The clock starts in the first window; some rows predate it, some predate the model's start."""
        self.count("start")
        self.now = GRID0 + offset
        for tenant, back in history:
            self.add_row(tenant, max(self.now - back, JAN1_EPOCH * S))
        self.write_source()

    @rule(tenant=st.sampled_from(["org_1", "org_2", "org_3"]), n=st.integers(1, 6), data=st.data())
    def insert(self, tenant: str, n: int, data: st.DataObject) -> None:
        """New rows, all sharing one timestamp: now, on a boundary, at the HW, or late (in or beyond the lookback)."""
        self.count("insert")
        t = data.draw(st.sampled_from(self.candidate_times()), label="updated_at")
        for _ in range(n):
            self.add_row(tenant, t)
        self.write_source()

    @precondition(lambda self: bool(self.source_rows))
    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        """An existing row changes and its last-modified moves forward (or stays equal)."""
        self.count("update")
        key = data.draw(st.sampled_from(sorted(self.source_rows)), label="id")
        tenant, status, amount, old = self.source_rows[key]
        forward = self.candidate_times(not_before=old + 1)
        t = data.draw(st.one_of(st.just(old), st.sampled_from(forward)) if forward else st.just(old), label="updated_at")
        self.source_rows[key] = (tenant, f"v{int(status[1:]) + 1}", amount + 1.0, t)
        self.write_source()

    @precondition(lambda self: len(self.open_txns) < 2)
    @rule(tenant=st.sampled_from(["org_1", "org_2", "org_3"]), n=st.integers(1, 3))
    def open_transaction(self, tenant: str, n: int) -> None:
        """A writer opens a transaction now and writes rows dated at its start; no read sees them yet."""
        self.count("open_transaction")
        self.open_now(tenant, n)

    def open_now(self, tenant: str, n: int) -> None:
        rows = {}
        for _ in range(n):
            key, self.next_id = self.next_id, self.next_id + 1
            rows[key] = (tenant, "v0", key * 0.5, self.now)
        self.open_txns.append(OpenTransaction(start=self.now, rows=rows))

    @precondition(lambda self: bool(self.open_txns))
    @rule(data=st.data())
    def commit_transaction(self, data: st.DataObject) -> None:
        """A transaction that opened early commits late: its rows, dated at its start, become visible."""
        self.count("commit_transaction")
        self.commit(data.draw(st.integers(0, len(self.open_txns) - 1), label="which"))

    def commit(self, index: int) -> None:
        txn = self.open_txns.pop(index)
        self.source_rows.update(txn.rows)
        self.write_source()
        tenant = next(iter(txn.rows.values()))[0]
        rid = next((r for r, org in TENANTS.items() if org == tenant), None)
        if rid is not None and not txn.outlived_lag:
            self.late_rows.append((rid, txn.start, sorted(txn.rows)))

    @precondition(lambda self: len(self.open_txns) < 2 and self.now < GRID0 + MAX_SPAN)
    @rule(
        rid=st.sampled_from(sorted(TENANTS)),
        delay=st.sampled_from([S, LOOKBACK, LOOKBACK + S, 2 * LOOKBACK, WINDOW // 3]),
        data=st.data(),
    )
    def transaction_opens_early_commits_late(self, rid: str, delay: int, data: st.DataObject) -> None:
        """Issue 20 as one step: a transaction opens, another writer commits a later row, a scheduled tick
        runs, the transaction commits, and the next scheduled tick must bring its rows."""
        self.count("transaction_opens_early_commits_late")
        self.open_now(TENANTS[rid], 1)
        self.now += delay
        self.add_row(TENANTS[rid], self.now)
        self.write_source()
        self.scheduled_tick(rid, "engine")
        self.now += data.draw(st.sampled_from([1, S, LOOKBACK + S]), label="then")
        self.commit(len(self.open_txns) - 1)
        self.scheduled_tick(rid, "engine")

    @precondition(lambda self: self.now < GRID0 + MAX_SPAN)
    @rule(
        rid=st.sampled_from(sorted(TENANTS)),
        ahead=st.sampled_from(["1us", "1s", "window_end"]),
        then=st.sampled_from([1, S // 2, S, LOOKBACK + S]),
    )
    def row_ahead_then_rows_written_now(self, rid: str, ahead: str, then: int) -> None:
        """A row dated ahead of the clock in the open window, a scheduled tick, then a row written (and
        dated) now: the next scheduled tick brings it, and the row ahead stays in the table once."""
        tenant, start_r = TENANTS[rid], RECIPIENT_START[rid]
        end = window_of(self.now) + WINDOW
        dated = min({"1us": self.now + 1, "1s": self.now + S, "window_end": end - 1}[ahead], end - 1)
        if dated <= self.now:  # the clock is on the open window's last µs: nothing lies ahead in it
            return
        self.count("row_ahead_then_rows_written_now")
        ahead_key = self.add_row(tenant, dated)
        self.write_source()
        self.scheduled_tick(rid, "engine")
        self.now += then
        now_key = self.add_row(tenant, self.now)
        self.write_source()
        self.scheduled_tick(rid, "engine")
        rows, _ = self.visible(rid)  # a key twice fails there
        for key in (ahead_key, now_key):
            if self.source_rows[key][3] >= start_r:
                assert key in rows, f"{rid}: row {key} dated {self.source_rows[key][3]} is missing after the scheduled tick"

    @precondition(lambda self: self.now < GRID0 + MAX_SPAN)
    @rule(step=st.one_of(st.sampled_from(["boundary", "before_boundary", 1, S // 2, S, LOOKBACK - S, LOOKBACK, LOOKBACK + 1]), st.integers(1, WINDOW)))
    def tick(self, step: int | str) -> None:
        """The clock moves: by a µs, sub-second, around the lookback, or exactly onto a window boundary."""
        self.count("tick")
        boundary = window_of(self.now) + WINDOW
        if step == "boundary":
            self.now = boundary
        elif step == "before_boundary":
            self.now = max(self.now, boundary - 1)
        else:
            assert isinstance(step, int)
            self.now += step

    # ---- rules: transfers ------------------------------------------------------------------------

    @rule(rid=st.sampled_from(sorted(TENANTS)), via=VIA)
    def scheduled_tick(self, rid: str, via: str) -> None:
        """What a schedule tick runs: the window that closed since the last tick, then the open window."""
        self.count("scheduled_tick")
        current, previous = window_of(self.now), self.last_tick[rid]
        if previous is not None and previous != current:  # one run, one read over both (coalesced)
            self.run(rid, previous, scheduled=True, last_window=current)
        else:
            self.run(rid, current, scheduled=True, via=via)
        self.last_tick[rid] = current
        self.no_row_left_behind(rid, ticked={current, previous})

    def no_row_left_behind(self, rid: str, *, ticked: set[int | None]) -> None:
        """Issue 20: a transaction that opened early and committed late has its rows in the destination
        after the next scheduled tick that runs their window (a tick runs the open and the just-closed one)."""
        rows, _ = self.visible(rid)
        for entry in [e for e in self.late_rows if e[0] == rid]:
            self.late_rows.remove(entry)
            _, start, keys = entry
            if window_of(start) in ticked:
                self.count("late_rows_checked")
                missing = [k for k in keys if k not in rows and self.source_rows[k][3] >= RECIPIENT_START[rid]]
                assert not missing, f"{rid}: rows {missing} of a transaction open since {start} were left behind"

    @rule(rid=st.sampled_from(sorted(TENANTS)), data=st.data())
    def coalesced_backfill(self, rid: str, data: st.DataObject) -> None:
        """One run over up to four contiguous windows: one read, one commit, a record per window."""
        windows = self.windows(rid)
        first = data.draw(st.integers(0, len(windows) - 1), label="first")
        last = data.draw(st.integers(first, min(len(windows) - 1, first + 3)), label="last")
        self.run(rid, windows[first], last_window=windows[last])

    @rule(data=st.data())
    def fan_out_run(self, data: st.DataObject) -> None:
        """Several recipients in one run: one read for all, each published to its own destination."""
        self.count("fan_out")
        rids = data.draw(st.lists(st.sampled_from(sorted(TENANTS)), min_size=2, max_size=len(TENANTS), unique=True), label="rids")
        windows = self.windows(rids[0])
        first = data.draw(st.integers(0, len(windows) - 1), label="first")
        last = data.draw(st.integers(first, min(len(windows) - 1, first + 2)), label="last")
        scheduled = data.draw(st.booleans(), label="scheduled")
        span = range(windows[first], windows[last] + WINDOW, WINDOW)
        keys = [window_key_for(self.model, dt(w)) for w in span]
        cap = self.safe_horizon()
        expected = {
            rid: self.reference[rid].peek(
                self.source_rows, tenant=TENANTS[rid], start_r=RECIPIENT_START[rid], window=windows[first],
                scheduled=scheduled, full_refresh=False, last_window=windows[last], cap=cap,
            )
            for rid in rids
        }
        outcomes = self.execute({rid: keys for rid in rids}, scheduled=scheduled)
        for rid in rids:
            got, want = outcomes[rid], expected[rid]
            assert [o.record.window_start for o in got] == [dt(w).isoformat() for w in span]
            assert {(us(o.bounds.lower), us(o.bounds.upper)) for o in got} == {(want.lower, want.upper)}, rid
            assert sum(o.record.rows_transferred for o in got) == want.rows, rid
            assert sum(o.record.delta_rows_transferred for o in got) == want.delta_rows, rid
            record = self.destinations[rid].read_state(model=self.model, recipient=self.recipients[rid]).last_transfer
            assert record is not None and record.high_watermark_micros == want.high_watermark, rid
            self.reference[rid].transfer(
                self.source_rows, tenant=TENANTS[rid], start_r=RECIPIENT_START[rid], window=windows[first],
                scheduled=scheduled, full_refresh=False, last_window=windows[last], cap=cap,
            )

    @rule(rid=st.sampled_from(sorted(TENANTS)), data=st.data())
    def backfill(self, rid: str, data: st.DataObject) -> None:
        """A backfill of a random set of windows, in random order."""
        self.count("backfill")
        windows = data.draw(st.lists(st.sampled_from(self.windows(rid)), min_size=1, max_size=4, unique=True), label="windows")
        via = data.draw(VIA, label="via")
        for window in windows:
            self.run(rid, window, via=via)

    @precondition(lambda self: any(self.last_request.values()))
    @rule(data=st.data())
    def rerun(self, data: st.DataObject) -> None:
        """Run a recipient's last transfer again, exactly as it was launched."""
        self.count("rerun")
        rid = data.draw(st.sampled_from(sorted(r for r, req in self.last_request.items() if req)), label="rid")
        window, scheduled, full_refresh = self.last_request[rid]  # type: ignore[misc]
        self.run(rid, window, scheduled=scheduled, full_refresh=full_refresh)

    @rule(rid=st.sampled_from(sorted(TENANTS)), data=st.data())
    def full_refresh(self, rid: str, data: st.DataObject) -> None:
        """Reload a recipient from its start up to a window (usually the open one)."""
        self.count("full_refresh")
        windows = self.windows(rid)
        window = data.draw(st.one_of(st.just(windows[-1]), st.sampled_from(windows)), label="window")
        via = data.draw(VIA, label="via")
        self.run(rid, window, full_refresh=True, via=via)

    @rule(rid=st.sampled_from(sorted(TENANTS)), kind=st.sampled_from(["duplicate_key", "null_key", "null_last_modified"]), data=st.data())
    def failing_run(self, rid: str, kind: str, data: st.DataObject) -> None:
        """A batch breaking the model's contract fails its transfer, and nothing a reader sees changes."""
        start_r = RECIPIENT_START[rid]
        windows = [w for w in self.windows(rid) if max(w, start_r) <= min(w + WINDOW - 1, self.now)]
        if not windows:
            return
        self.count("failing_run")
        window = data.draw(st.sampled_from(windows), label="window")
        t = max(window, start_r)
        tenant = TENANTS[rid]
        bad_id = 10_000_000 + self.next_id
        bad = {"id": bad_id, "organization_id": tenant, "status": "bad", "amount": 0.0, "updated_at": dt(t)}
        if kind == "duplicate_key":
            self.bad_rows = [bad, {**bad, "status": "bad twin"}]
            message = f"occur more than once in the batch: ({bad_id})"
        elif kind == "null_key":
            self.bad_rows = [{**bad, "id": None}]
            message = "have a NULL primary key (id)"
        else:
            self.bad_rows = [{**bad, "updated_at": None}]
            message = f"NULL last-modified column updated_at (keys ({bad_id}))"
        self.write_source()
        before = self.visible(rid), self.delta_version(rid)
        via = data.draw(VIA, label="via")
        try:
            if via == "dagster":
                key = window_key_for(self.model, dt(window))
                result = materialize_partition(self.dagster_defs(), self.instance, window=key, recipient=rid, raise_on_error=False)
                assert not result.success
                errors = [e.event_specific_data.error.to_string() for e in result.all_events if e.is_step_failure]
                assert errors and message in errors[0], errors
            else:
                with pytest.raises(ValidationError) as info:
                    run_transfer(self.request(rid, window_key_for(self.model, dt(window)), scheduled=False, full_refresh=False), staging_root=self.staging)
                assert message in str(info.value)
                assert f"model orders, recipient {rid}" in str(info.value)
        finally:
            self.bad_rows = []
            self.write_source()
        assert (self.visible(rid), self.delta_version(rid)) == before, f"the failed {kind} run of {rid} changed the destination"

    @rule(rid=st.sampled_from(sorted(TENANTS)), data=st.data())
    def catch_up(self, rid: str, data: st.DataObject) -> None:
        """Every window up to now, in random order: the destination then holds exactly the source's rows."""
        self.count("catch_up")
        for window in data.draw(st.permutations(self.windows(rid)), label="order"):
            self.run(rid, window)
        rows, _ = self.visible(rid)
        end = window_of(self.now) + WINDOW  # rows dated in later windows wait for them (a full refresh may have read them)
        rows = {k: r for k, r in rows.items() if k not in self.source_rows or self.source_rows[k][3] < end}
        want = {k: r for k, r in self.source_rows.items() if r[0] == TENANTS[rid] and RECIPIENT_START[rid] <= r[3] < end}
        assert rows == want, f"{rid} after catching up: destination differs from the source"

    def delta_version(self, rid: str) -> int | None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(str(self.root / "out" / rid / "orders")).version()
        except TableNotFoundError:
            return None

    # ---- invariants ------------------------------------------------------------------------------

    @invariant()
    def destination_matches_reference(self) -> None:
        for rid, ref in self.reference.items():
            rows, state = self.visible(rid)
            assert rows == ref.rows, f"{rid}: destination {sorted(rows.items())} != reference {sorted(ref.rows.items())}"
            assert all(r[0] == TENANTS[rid] for r in rows.values()), f"{rid}: a row of another tenant"
            hw = state.last_transfer.high_watermark_micros if state.last_transfer else None
            assert hw == ref.high_watermark
            assert hw is None or hw <= self.now, f"{rid}: HW {hw} is past the clock ({self.now}): a row dated ahead pulled it"
            newest = max((r[3] for r in rows.values()), default=None)
            assert hw is None or (newest is not None and hw <= newest), f"{rid}: HW {hw} names data not committed (newest {newest})"
            for txn in self.open_txns:  # the safe horizon: an open transaction's rows stay within reach
                if not txn.outlived_lag and hw is not None:
                    assert hw <= txn.start, f"{rid}: HW {hw} passed the start of open transaction {txn.start}"

    @invariant()
    def staging_is_clean(self) -> None:
        leftovers = list(self.staging.glob("*")) if self.staging.exists() else []
        assert not leftovers, f"staging not cleaned: {leftovers}"


def run_machine(spark: Any, tmp_path: Path, profile: str) -> dict[str, int]:
    import dagster as dg

    TransferMachine.spark = spark
    TransferMachine.scratch = tmp_path
    TransferMachine.stats = {}
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        TransferMachine.instance = instance
        run_state_machine_as_test(TransferMachine, settings=settings.get_profile(profile))
    return dict(TransferMachine.stats)


@pytest.fixture
def only_the_runs_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full refresh here records the run's own windows, as before docs/design.md#the-partition-view: the machine's
    hourly grid starts in 2024, so each full refresh would record every hour since (~25,000 windows, seconds a step).
    The machine checks the copy's rows, bounds and HW, which that rule leaves unchanged; the partition view of a full
    refresh is tested in test_transfer_plans.py and cli/test_partition_view.py."""
    monkeypatch.setattr(Transfer, "whole", lambda self, upper: self.requests)


def test_transfer_invariants_fast(spark, tmp_path: Path, only_the_runs_windows: None) -> None:
    stats = run_machine(spark, tmp_path, "fast")
    print("state machine (fast):", stats)
    assert stats.get("engine", 0) > 0


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(PROFILE_ENV) != "long", reason=f"set {PROFILE_ENV}=long (make test-long)")
def test_transfer_invariants_long(spark, tmp_path: Path, only_the_runs_windows: None) -> None:
    stats = run_machine(spark, tmp_path, "long")
    print("state machine (long):", stats)
    assert stats.get("dagster", 0) > 0 and stats.get("failing_run", 0) > 0 and stats.get("catch_up", 0) > 0


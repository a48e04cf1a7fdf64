"""Day one: a provider onboards ``--recipients`` recipients at once; what the first sync costs and what
the UI shows afterwards.

The shape of workload S (``scale_daemon.py``), before any transfer: one PostgreSQL source table shared by
every tenant (``--rows`` rows each, last-modified spread over the last 30 days), a PostgreSQL schema per
recipient, daily windows from a model start a year before the data (395 windows), no recipient override,
local Spark in every run, the ``dagster.yaml`` that ``incsync dagster-yaml`` writes. ``--instance
sqlite,postgres`` runs it once per Dagster instance (``instances.py``), each with fresh databases.

The first sync (``--first-sync``), one after the other with fresh databases each:
- ``sensor``: ``dagster-daemon`` starts; the recipient sensor registers the recipients and launches each
  one's initial backfill (every window from its start), the run queue runs them;
- ``cli``: ``incsync transfer orders`` (every enabled recipient; a recipient without a transfer record is
  re-synced from its start as one full refresh), no daemon.

Reported per instance and first sync:
- time from the daemon's start (or the command's) to the end of the last run it launched;
- materializations (partitions) and the destination rows (every row must have arrived);
- the instance's storage afterwards: SQLite, the bytes of every file under DAGSTER_HOME (the event log's
  run shards and its index shard apart); PostgreSQL, ``pg_total_relation_size`` of Dagster's tables;
  bytes per materialization;
- the peak RSS of the process tree (the daemon, its code server, the runs and their JVMs; or the command
  and its JVM), sampled every 0.5 s, and of its JVMs;
- where the bytes go: the event log's rows by event type (stored bytes; on PostgreSQL also their size
  after TOAST compression), and a materialization's serialized size by metadata entry, windows with rows
  and empty windows apart;
- the asset page afterwards, from a ``dagster-webserver`` over the same instance (nothing else running):
  each query the installed UI sends for the asset page, taken from the UI's own bundle with its fragments
  (partition stats, partition health, latest materialization, recent events), timed ``--repeat`` times
  (the first, cold, and the median), and the UI's count of missing partitions: the asset's partition
  stats (partitions − materialized − failed, as the asset page computes it) and the partition health
  bar's ranges. (Dagster OSS answers no asset health, ``AssetHealthQuery``: the instance says it does
  not support it, so the page's health is the partition health bar.)

Not part of ``make test``:

    .venv/bin/python benchmarks/day_one.py --recipients 1000 --instance sqlite,postgres --first-sync sensor,cli
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instances import INSTANCES, Instances, environment, parse_instances
from jdbc_postgres import HOST, PORT, pg_user
from scale_daemon import (
    MODEL,
    TreeRss,
    generate,
    instigator_state,
    tenant,
    write_config,
)

from incsync.operations.dagster_compat.compact import expand

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FIRST_SYNCS = ("sensor", "cli")
ASSET_PATH = ["app_db", MODEL]  # partitions.model_asset_key: [source, model]
NEVER = "0 0 1 1 *"  # the schedule does not fire during the benchmark
MATERIALIZATION = "ASSET_MATERIALIZATION"


def parse_list(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [k.strip() for k in text.split(",") if k.strip()]
    unknown = sorted(set(items) - set(allowed))
    if unknown or not items:
        raise SystemExit(f"{flag}: {', '.join(unknown) or '(empty)'} is not one of {', '.join(allowed)}")
    return items


# --- The asset page's queries, as the installed UI sends them ------------------------------------------------

UI_QUERIES = {
    # name in the report: (the UI's operation, variables beyond the asset key), in the order the page asks.
    # The definition comes first, so the webserver's cold start (the asset graph) is not charged to the
    # partition stats; their first answer still computes Dagster's cached partition status from the events.
    "definition": ("AssetViewDefinitionQuery", {}),
    "partition stats": ("AssetGraphLiveQuery", {}),
    "partition health": ("PartitionHealthQuery", {}),
    "latest materialization": ("AssetOverviewMetadataEventsQuery", {}),
    "recent events (100)": ("RecentAssetEventsQuery", {
        "limit": 100, "eventTypeSelectors": ["MATERIALIZATION", "FAILED_TO_MATERIALIZE", "OBSERVATION"]}),
}
_DEFINITION = re.compile(r"(query|fragment) (\w+)[^{]*\{")


def _definitions(text: str) -> list[tuple[str, str, str]]:
    """(kind, name, text) of each top-level GraphQL definition in ``text``."""
    out, at = [], 0
    while (m := _DEFINITION.search(text, at)) is not None:
        depth, end = 0, m.end() - 1
        for end in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        out.append((m.group(1), m.group(2), text[m.start(): end + 1]))
        at = end + 1
    return out


def ui_queries() -> dict[str, str]:
    """Each operation of ``UI_QUERIES`` with the fragments it spreads, from the installed dagster-webserver's
    UI bundle (its gql templates are string literals; the fragments are joined in at runtime)."""
    import dagster_webserver

    chunks = Path(dagster_webserver.__file__).parent / "webapp" / "build" / "_next" / "static" / "chunks"
    literal = re.compile(r'\["(\\n\s*(?:query|fragment) (?:[^"\\]|\\.)*)"')
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for path in chunks.rglob("*.js"):
        text = path.read_text(errors="replace")
        for m in literal.finditer(text):
            for kind, name, body in _definitions(json.loads(f'"{m.group(1)}"')):
                (fragments if kind == "fragment" else queries).setdefault(name, body)
    out = {}
    for label, (operation, _) in UI_QUERIES.items():
        if operation not in queries:
            raise SystemExit(f"the installed UI bundle ({chunks}) has no query {operation}; update UI_QUERIES")
        used: list[str] = []
        todo = [queries[operation]]
        while todo:
            for name in re.findall(r"\.\.\.(\w+)", todo.pop()):
                if name != "on" and name not in used:
                    used.append(name)
                    todo.append(fragments[name])
        out[label] = with_typename("\n".join([queries[operation], *(fragments[n] for n in used)]))
    return out


def with_typename(text: str) -> str:
    """``__typename`` in every selection set below the operation's root, as the UI's Apollo client adds it."""
    from graphql import (
        FieldNode,
        NameNode,
        OperationDefinitionNode,
        Visitor,
        parse,
        print_ast,
        visit,
    )

    class AddTypename(Visitor):
        def enter_selection_set(self, node, _key, parent, _path, _ancestors):
            if isinstance(parent, OperationDefinitionNode):
                return
            if any(isinstance(s, FieldNode) and s.name.value == "__typename" for s in node.selections):
                return
            node.selections = (*node.selections, FieldNode(name=NameNode(value="__typename"), arguments=(), directives=()))
            return

    return print_ast(visit(parse(text), AddTypename()))


class Webserver:
    """A ``dagster-webserver`` over the instance in ``env``; GraphQL answers timed from the client."""

    def __init__(self, env: dict[str, str], log: Path):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(self.port), "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.rss = TreeRss(self.proc.pid)

    def post(self, query: str, variables: dict[str, Any], timeout: float = 600) -> tuple[dict[str, Any], float, int]:
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", body, {"Content-Type": "application/json"})
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
        seconds = time.perf_counter() - began
        doc = json.loads(raw)
        if doc.get("errors"):
            raise RuntimeError(f"GraphQL errors: {json.dumps(doc['errors'])[:2000]}")
        return doc["data"], seconds, len(raw)

    def wait_loaded(self, timeout: float = 300) -> float:
        """Until the code location is loaded; the seconds since start."""
        began, deadline = time.monotonic(), time.monotonic() + timeout
        query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"dagster-webserver exited {self.proc.returncode}; see {self.log.name}")
            try:
                data, _, _ = self.post(query, {}, timeout=10)
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    return time.monotonic() - began
            except (OSError, RuntimeError, KeyError):
                pass
            time.sleep(0.5)
        raise SystemExit(f"dagster-webserver did not load its code location within {timeout:.0f} s")

    def stop(self) -> None:
        self.rss.stop()
        stop_group(self.proc)
        self.log.close()


def stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def health_counts(node: dict[str, Any]) -> dict[str, int]:
    """Materialized and failed partitions as the partition health bar draws them: each range of the primary
    (window) dimension × the recipients its secondary statuses list."""
    dims = {d["name"]: d["partitionKeys"] for d in node["partitionKeysByDimension"]}
    statuses = node["assetPartitionStatuses"]
    total = 1
    for keys in dims.values():
        total *= len(keys)
    if statuses["__typename"] != "MultiPartitionStatuses":
        raise SystemExit(f"partition health: expected MultiPartitionStatuses, got {statuses['__typename']}")
    primary = {key: i for i, key in enumerate(dims[statuses["primaryDimensionName"]])}
    secondary = next(keys for name, keys in dims.items() if name != statuses["primaryDimensionName"])
    counts = {"MATERIALIZED": 0, "FAILED": 0}
    for r in statuses["ranges"]:
        width = primary[r["primaryDimEndKey"]] - primary[r["primaryDimStartKey"]] + 1
        sec = r["secondaryDim"]
        if sec["__typename"] == "DefaultPartitionStatuses":
            counts["MATERIALIZED"] += width * len(sec["materializedPartitions"])
            counts["FAILED"] += width * len(sec["failedPartitions"])
        else:  # time ranges of the secondary dimension
            index = {key: i for i, key in enumerate(secondary)}
            for s in sec["ranges"]:
                if s["status"] in counts:
                    counts[s["status"]] += width * (index[s["endKey"]] - index[s["startKey"]] + 1)
    return {"health_partitions": total, "health_materialized": counts["MATERIALIZED"], "health_failed": counts["FAILED"],
            "health_missing": total - counts["MATERIALIZED"] - counts["FAILED"], "health_ranges": len(statuses["ranges"])}


def asset_page(env: dict[str, str], work: Path, repeat: int) -> dict[str, Any]:
    """The asset page's queries against a fresh webserver; their times and what they say."""
    queries = ui_queries()
    server = Webserver(env, work / "webserver.log")
    out: dict[str, Any] = {}
    try:
        out["webserver_load_seconds"] = round(server.wait_loaded(), 1)
        key = {"path": ASSET_PATH}
        answers: dict[str, Any] = {}
        for label, (operation, extra) in UI_QUERIES.items():
            variables = {**({"assetKeys": [key]} if "$assetKeys" in queries[label] else {"assetKey": key}), **extra}
            times = []
            for _ in range(repeat):
                data, seconds, size = server.post(queries[label], variables)
                times.append(seconds)
            answers[label] = data
            out[f"graphql {label}"] = {"operation": operation, "first_s": round(times[0], 3),
                                       "median_s": round(statistics.median(times), 3), "bytes": size}
            print(f"  GraphQL {label} ({operation}): first {times[0]:.3f} s, median of {repeat} "
                  f"{statistics.median(times):.3f} s, {size:,} bytes", flush=True)
        stats = answers["partition stats"]["assetNodes"][0]["partitionStats"]
        out["ui_partitions"] = stats["numPartitions"]
        out["ui_materialized"] = stats["numMaterialized"]
        out["ui_failed"] = stats["numFailed"]
        out["ui_materializing"] = stats["numMaterializing"]
        out["ui_missing"] = stats["numPartitions"] - stats["numFailed"] - stats["numMaterialized"]  # the asset page's sum
        out.update(health_counts(answers["partition health"]["assetNodeOrError"]))
        out["webserver_peak_rss_mb"] = round(server.rss.peak / 2**20)
    finally:
        server.stop()
    return out


# --- Storage and where its bytes go --------------------------------------------------------------------------

def folder_bytes(home: Path) -> dict[str, int]:
    """Bytes of every file under the SQLite instance's DAGSTER_HOME, by part."""
    runs = home / "history" / "runs"
    parts = {"index shard": 0, "run shards": 0, "run storage": 0, "schedule storage": 0, "compute logs": 0, "other": 0}
    shards = 0
    for path in home.rglob("*"):
        if not path.is_file():
            continue
        size = path.stat().st_size
        if path.parent == runs and path.name.startswith("index.db"):
            parts["index shard"] += size
        elif path.parent == runs and ".db" in path.name:
            parts["run shards"] += size
            shards += path.name.endswith(".db")
        elif path.parent == home / "history" and path.name.startswith("runs.db"):
            parts["run storage"] += size
        elif path.parts[len(home.parts)] == "schedules":
            parts["schedule storage"] += size
        elif path.parts[len(home.parts)] == "storage":
            parts["compute logs"] += size
        else:
            parts["other"] += size
    return {"total": sum(parts.values()), "run_shard_files": shards, **parts}


def postgres_bytes(conn: psycopg.Connection) -> dict[str, int]:
    """pg_total_relation_size of each of Dagster's tables (with indexes and TOAST), largest first."""
    rows = conn.execute(
        """SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 2 DESC"""
    ).fetchall()
    return {"total": sum(size for _, size in rows), "tables": {name: size for name, size in rows if size}}


def _sqlite_rows(path: Path, query: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute(query, params).fetchall()


BY_TYPE = "SELECT dagster_event_type, count(*), sum(length(event)) FROM event_logs GROUP BY 1"


def event_rows_sqlite(home: Path) -> dict[str, Any]:
    """The event log's rows by type in the index shard and in the run shards (SQLite stores an asset
    event in both), and their serialized bytes."""
    runs = home / "history" / "runs"
    index = {t or "(none)": {"rows": n, "bytes": b} for t, n, b in _sqlite_rows(runs / "index.db", BY_TYPE)}
    shards: dict[str, dict[str, int]] = {}
    for shard in runs.glob("*.db"):
        if shard.name == "index.db":
            continue
        for t, n, b in _sqlite_rows(shard, BY_TYPE):
            into = shards.setdefault(t or "(none)", {"rows": 0, "bytes": 0})
            into["rows"] += n
            into["bytes"] += b or 0
    return {"index shard": index, "run shards": shards}


def event_rows_postgres(conn: psycopg.Connection) -> dict[str, Any]:
    rows = conn.execute(
        """SELECT coalesce(dagster_event_type, '(none)'), count(*), sum(octet_length(event)), sum(pg_column_size(event))
           FROM event_logs GROUP BY 1 ORDER BY 3 DESC"""
    ).fetchall()
    return {"event_logs": {t: {"rows": n, "bytes": b, "stored_bytes": s} for t, n, b, s in rows}}


def _find_metadata(doc: Any) -> dict[str, Any] | None:
    """The metadata of the AssetMaterialization inside a serialized EventLogEntry: label → its serialized
    entry (Dagster stores ``metadata_entries``, a list of ``EventMetadataEntry`` with ``label``)."""
    if isinstance(doc, dict):
        if doc.get("__class__") == "AssetMaterialization":
            entries = doc.get("metadata_entries")
            if isinstance(entries, list):
                return {e["label"]: e for e in entries}
            return dict(doc.get("metadata") or {})
        for value in doc.values():
            if (found := _find_metadata(value)) is not None:
                return found
    elif isinstance(doc, list):
        for value in doc:
            if (found := _find_metadata(value)) is not None:
                return found
    return None


def _value(entry: Any) -> Any:
    """An entry's value without its framing (class names, label, description)."""
    if isinstance(entry, dict):
        data = entry.get("entry_data", entry)
        return {k: v for k, v in data.items() if k != "__class__"} if isinstance(data, dict) else data
    return entry


def entry_sizes(events: list[str]) -> dict[str, Any]:
    """A materialization's serialized bytes by metadata entry (as stored, with its ", " separator), for
    windows with rows and empty windows apart; what is not metadata is the envelope. The framing is what
    the entries spend beside their labels and values (class names, descriptions, keys)."""
    groups: dict[str, dict[str, Any]] = {}
    for stored in events:
        text = expand(stored)  # compact text (incsync's event logs) as the JSON it stands for
        metadata = _find_metadata(json.loads(text))
        if metadata is None:
            continue
        rows = _value(metadata.get("rows_transferred")).get("value") if "rows_transferred" in metadata else None
        group = groups.setdefault("empty windows" if not rows else "windows with rows",
                                  {"events": 0, "bytes": 0, "stored": 0, "count": 0, "framing": 0, "entries": {}})
        group["events"] += 1
        group["bytes"] += len(text)
        group["stored"] += len(stored)
        group["count"] += len(metadata)
        for label, entry in metadata.items():
            size = len(json.dumps(entry)) + 2
            group["entries"][label] = group["entries"].get(label, 0) + size
            group["framing"] += size - len(json.dumps(label)) - len(json.dumps(_value(entry)))
    out = {}
    for name, group in groups.items():
        n = group["events"]
        entries = {k: round(v / n) for k, v in sorted(group["entries"].items(), key=lambda kv: -kv[1]) if round(v / n)}
        out[name] = {"sampled_events": n, "avg_event_bytes": round(group["bytes"] / n),
                     "avg_stored_bytes": round(group["stored"] / n), "avg_entries": round(group["count"] / n, 1),
                     "avg_metadata_bytes": sum(entries.values()),
                     "avg_metadata_framing_bytes": round(group["framing"] / n),
                     "avg_envelope_bytes": round(group["bytes"] / n) - sum(entries.values()), "avg_bytes_by_entry": entries}
    return out


def shared_entries(events: list[str]) -> dict[str, Any]:
    """Of one recipient's materializations (one transfer's windows): the entries whose value is the same
    in every window, and their bytes in one event."""
    values: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    present: dict[str, int] = {}
    windows = 0
    for text in events:
        metadata = _find_metadata(json.loads(expand(text)))
        if metadata is None:
            continue
        windows += 1
        for label, entry in metadata.items():
            values.setdefault(label, set()).add(json.dumps(_value(entry), sort_keys=True))
            sizes[label] = len(json.dumps(entry)) + 2
            present[label] = present.get(label, 0) + 1
    same = sorted(label for label, seen in values.items() if len(seen) == 1 and present[label] == windows)
    return {"windows": windows, "same_in_every_window": same, "their_bytes": sum(sizes[label] for label in same),
            "in_some_windows": {label: n for label, n in sorted(present.items()) if n < windows},
            "differing": sorted(label for label in values if label not in same and present[label] == windows)}


def sample_materializations_sqlite(home: Path, sample: int) -> list[str]:
    index = home / "history" / "runs" / "index.db"
    (n,) = _sqlite_rows(index, "SELECT count(*) FROM event_logs WHERE dagster_event_type = ?", (MATERIALIZATION,))[0]
    step = max(1, n // sample)
    return [e for (e,) in _sqlite_rows(
        index, "SELECT event FROM event_logs WHERE dagster_event_type = ? AND id % ? = 0 LIMIT ?", (MATERIALIZATION, step, sample))]


def recipient_materializations_sqlite(home: Path, recipient: str) -> list[str]:
    return [e for (e,) in _sqlite_rows(home / "history" / "runs" / "index.db",
                                       "SELECT event FROM event_logs WHERE dagster_event_type = ? AND partition LIKE ?",
                                       (MATERIALIZATION, f"{recipient}|%"))]


def recipient_materializations_postgres(conn: psycopg.Connection, recipient: str) -> list[str]:
    return [e for (e,) in conn.execute("SELECT event FROM event_logs WHERE dagster_event_type = %s AND partition LIKE %s",
                                       (MATERIALIZATION, f"{recipient}|%"))]


def sample_materializations_postgres(conn: psycopg.Connection, sample: int) -> list[str]:
    (n,) = conn.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = %s", (MATERIALIZATION,)).fetchone()
    step = max(1, n // sample)
    return [e for (e,) in conn.execute(
        "SELECT event FROM event_logs WHERE dagster_event_type = %s AND id %% %s = 0 LIMIT %s", (MATERIALIZATION, step, sample))]


# --- The first sync --------------------------------------------------------------------------------------------

def sensor_first_sync(env: dict[str, str], harness_env: dict[str, str], work: Path, expected_runs: int,
                      timeout: float) -> dict[str, Any]:
    """``dagster-daemon`` from start to the end of the last run the recipient sensor launched."""
    import dagster as dg

    from incsync.orchestration.sensors import RECIPIENT_SENSOR

    finished = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    log = (work / "daemon.log").open("w")
    started = time.time()
    daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rss = TreeRss(daemon.pid)
    out: dict[str, Any] = {}
    try:
        with environment(harness_env), dg.DagsterInstance.get() as instance:
            deadline, run_ids, first_tick, done = time.monotonic() + timeout, [], None, -1
            while time.monotonic() < deadline:
                if daemon.poll() is not None:
                    raise SystemExit(f"dagster-daemon exited {daemon.returncode}; see {work / 'daemon.log'}")
                state = instigator_state(instance, RECIPIENT_SENSOR)
                ticks = [] if state is None else instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=100)
                run_ids = [r for t in sorted(ticks, key=lambda t: t.timestamp) for r in t.run_ids]
                if run_ids and first_tick is None:
                    first_tick = min(t.timestamp for t in ticks if t.run_ids)
                    print(f"  sensor tick at +{first_tick - started:.1f} s launched {len(run_ids)} runs", flush=True)
                records = instance.get_run_records(dg.RunsFilter(run_ids=run_ids)) if run_ids else []
                now_done = sum(r.dagster_run.status in finished for r in records)
                if now_done != done:
                    done = now_done
                    print(f"  {done}/{len(run_ids)} runs finished at +{time.time() - started:.0f} s", flush=True)
                if len(run_ids) >= expected_runs and done == len(run_ids):
                    break
                time.sleep(2)
            else:
                raise SystemExit(f"the sensor's runs did not finish within {timeout:.0f} s")
        out["first_sync_seconds"] = round(max(r.end_time for r in records) - started, 1)
        out["sensor_tick_after_seconds"] = round(first_tick - started, 1)
        out["runs"] = len(records)
        out["runs_failed"] = sum(r.dagster_run.status != dg.DagsterRunStatus.SUCCESS for r in records)
        out["run_seconds"] = [round(r.end_time - r.start_time, 1) for r in records if r.start_time and r.end_time]
    finally:
        rss.stop()
        stop_group(daemon)
        log.close()
    out.update(peak_tree_rss_mb=round(rss.peak / 2**20), peak_tree_python_rss_mb=round(rss.peak_python / 2**20),
               peak_tree_jvm_rss_mb=round(rss.peak_jvm / 2**20), peak_tree_processes=rss.peak_processes,
               peak_rss_mb_by_role={k: round(v / 2**20) for k, v in sorted(rss.peak_by_role.items())})
    return out


def cli_first_sync(env: dict[str, str], work: Path, config: Path, timeout: float) -> dict[str, Any]:
    """``incsync transfer orders`` from start to exit."""
    log = (work / "transfer.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen([str(BIN / "incsync"), "transfer", MODEL, "--no-worker", "-c", str(config)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rss = TreeRss(proc.pid)
    try:
        code = proc.wait(timeout)
    finally:
        rss.stop()
        stop_group(proc)
        log.close()
    seconds = time.monotonic() - started
    if code:
        raise SystemExit(f"incsync transfer exited {code}; see {work / 'transfer.log'}")
    return {"first_sync_seconds": round(seconds, 1), "peak_tree_rss_mb": round(rss.peak / 2**20),
            "peak_tree_python_rss_mb": round(rss.peak_python / 2**20), "peak_tree_jvm_rss_mb": round(rss.peak_jvm / 2**20),
            "peak_rss_mb_by_role": {k: round(v / 2**20) for k, v in sorted(rss.peak_by_role.items())},
            "peak_tree_processes": rss.peak_processes}


def destination_rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        schemas = [s for (s,) in conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = %s AND table_schema LIKE 's\\_r%%'",
            (MODEL,))]
        return sum(conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(s), sql.Identifier(MODEL))).fetchone()[0]
                   for s in schemas)


def day_one(args: argparse.Namespace, first_sync: str, kind: str, recipients: int, work: Path, user: str,
            instances: Instances) -> dict[str, Any]:
    """One onboarding of ``recipients`` on the ``kind`` instance, in ``work`` with databases of its own."""
    from incsync.config.load import load_config

    work.mkdir(parents=True, exist_ok=True)
    suffix = uuid.uuid4().hex[:8]
    source_db, dest_db = f"bench_d1_src_{suffix}", f"bench_d1_dst_{suffix}"
    dagster_db = instances.next_name() if kind == "postgres" else None
    admin = f"postgresql://{user}@{HOST}:{PORT}/postgres"
    def dsn(db):
        return f"postgresql://{user}@{HOST}:{PORT}/{db}"
    home, config = work / ".dagster", work / "incsync.yaml"
    env = {**os.environ, "DAGSTER_HOME": str(home), "INCSYNC_CONFIG": str(config), "INCSYNC_STAGING_DIR": str(work / "staging"),
           "BENCH_DEST_DSN": dsn(dest_db), "DAGSTER_DISABLE_TELEMETRY": "yes"}
    result: dict[str, Any] = {"first_sync": first_sync, "instance": kind, "recipients": recipients,
                              "rows_per_recipient": args.rows}
    print(f"--- {first_sync} first sync, {recipients:,} recipients, {kind} instance ({work})", flush=True)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            for db in (source_db, dest_db):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        now = datetime.now(timezone.utc).replace(microsecond=0)
        data_start = now - timedelta(days=30)
        write_config(config, source_db=source_db, user=user, recipients=recipients, destination="postgres",
                     start=data_start - timedelta(days=365), frequency=NEVER)
        instance_env = instances.write(kind, config=config, home=home, base=ROOT / "dagster.yaml", db=dagster_db)
        env.update(instance_env)
        harness_env = {"DAGSTER_HOME": str(home), **instance_env}
        rows = generate(dsn(source_db), recipients, args.rows, data_start, now - timedelta(minutes=5))
        print(f"  source: {rows:,} rows over {recipients:,} tenants", flush=True)
        empty = folder_bytes(home)["total"] if kind == "sqlite" else _pg(user, dagster_db, postgres_bytes)["total"]
        result["storage_empty_bytes"] = empty
        with psycopg.connect(dsn(source_db), autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        if first_sync == "sensor":
            per_run = load_config(config).recipients_per_run
            result.update(sensor_first_sync(env, harness_env, work, -(-recipients // per_run), args.timeout))
        else:
            result.update(cli_first_sync(env, work, config, args.timeout))
        print(f"  first sync: {result['first_sync_seconds']} s; tree peak {result['peak_tree_rss_mb']:,} MB "
              f"(JVM {result['peak_tree_jvm_rss_mb']:,})", flush=True)
        result["rows_delivered"] = destination_rows(dsn(dest_db))
        result["rows_in_source"] = rows
        if kind == "sqlite":
            result["storage"] = folder_bytes(home)
            result["events"] = event_rows_sqlite(home)
            mats = result["events"]["index shard"].get(MATERIALIZATION, {}).get("rows", 0)
            sample = sample_materializations_sqlite(home, args.sample)
            one = recipient_materializations_sqlite(home, tenant(0))
        else:
            result["storage"] = _pg(user, dagster_db, postgres_bytes)
            result["events"] = _pg(user, dagster_db, event_rows_postgres)
            mats = result["events"]["event_logs"].get(MATERIALIZATION, {}).get("rows", 0)
            sample = _pg(user, dagster_db, lambda c: sample_materializations_postgres(c, args.sample))
            one = _pg(user, dagster_db, lambda c: recipient_materializations_postgres(c, tenant(0)))
        result["materializations"] = mats
        result["storage_bytes"] = result["storage"]["total"]
        result["bytes_per_partition"] = round((result["storage_bytes"] - empty) / mats) if mats else None
        result["materialization_entries"] = entry_sizes(sample)
        result["one_recipient_entries"] = shared_entries(one)
        print(f"  {mats:,} materializations; storage {result['storage_bytes'] / 1e6:,.1f} MB "
              f"({result['bytes_per_partition']} bytes a partition); {result['rows_delivered']:,} of {rows:,} rows delivered",
              flush=True)
        result.update(asset_page(env, work, args.repeat))
        print(f"  UI: {result['ui_materialized']:,} materialized, {result['ui_missing']:,} missing, {result['ui_failed']:,} "
              f"failed of {result['ui_partitions']:,}; the health bar: {result['health_missing']:,} missing in "
              f"{result['health_ranges']} ranges", flush=True)
    finally:
        if args.keep:
            if dagster_db:
                instances.keep(dagster_db)
            print(f"  kept {work} and databases {source_db}, {dest_db}", flush=True)
        else:
            if dagster_db:
                instances.drop(dagster_db)
            with psycopg.connect(admin, autocommit=True) as conn:
                for db in (source_db, dest_db):
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
            for heavy in (home, work / "staging"):
                shutil.rmtree(heavy, ignore_errors=True)
    (work / "result.json").write_text(json.dumps(result, indent=2))
    return result


def _pg(user: str, db: str | None, read):
    with psycopg.connect(host=HOST, port=PORT, user=user, dbname=db) as conn:
        return read(conn)


# --- Report ------------------------------------------------------------------------------------------------------

def _mb(value: Any) -> str:
    return f"{value / 1e6:,.1f}" if isinstance(value, int) else "–"


def _answer_times(label: str) -> Any:
    return lambda r: f"{r[f'graphql {label}']['first_s']} / {r[f'graphql {label}']['median_s']}"


FIGURES: list[tuple[str, Any]] = [
    ("start → last run done, s", lambda r: r["first_sync_seconds"]),
    ("runs / failed", lambda r: f"{r.get('runs', 1)} / {r.get('runs_failed', 0)}"),
    ("the sensor's tick, s after the daemon's start", lambda r: r.get("sensor_tick_after_seconds", "–")),
    ("materializations (partitions)", lambda r: f"{r['materializations']:,}"),
    ("rows delivered / in the source", lambda r: f"{r['rows_delivered']:,} / {r['rows_in_source']:,}"),
    ("instance storage afterwards, MB", lambda r: _mb(r["storage_bytes"])),
    ("of which event log: index shard / run shards (SQLite), event_logs (PostgreSQL), MB",
     lambda r: (f"{_mb(r['storage']['index shard'])} / {_mb(r['storage']['run shards'])}" if r["instance"] == "sqlite"
                else _mb(r["storage"]["tables"].get("event_logs")))),
    ("bytes per partition (storage added ÷ materializations)", lambda r: f"{r['bytes_per_partition']:,}" if r["bytes_per_partition"] else "–"),
    ("a materialization's serialized bytes: empty window / window with rows",
     lambda r: " / ".join(f"{g['avg_event_bytes']:,} ({g['avg_entries']:g} entries)" for g in _groups(r))),
    ("of which metadata (its framing: class names, descriptions) / the rest of the event",
     lambda r: " / ".join(f"{g['avg_metadata_bytes']:,} ({g['avg_metadata_framing_bytes']:,}) / {g['avg_envelope_bytes']:,}"
                          for g in _groups(r))),
    ("entries the same in all of a transfer's windows: bytes in each window",
     lambda r: f"{r['one_recipient_entries']['their_bytes']:,} ({len(r['one_recipient_entries']['same_in_every_window'])} entries)"),
    ("peak RSS of the tree (its JVMs), MB", lambda r: f"{r['peak_tree_rss_mb']:,} ({r['peak_tree_jvm_rss_mb']:,})"),
    ("each part's own peak RSS, MB", lambda r: ", ".join(f"{k} {v:,}" for k, v in r.get("peak_rss_mb_by_role", {}).items())),
    *[(f"GraphQL {label} ({op}), s: first / median", _answer_times(label)) for label, (op, _) in UI_QUERIES.items()],
    ("UI: materialized / missing / failed of partitions",
     lambda r: f"{r['ui_materialized']:,} / {r['ui_missing']:,} / {r['ui_failed']:,} of {r['ui_partitions']:,}"),
    ("UI partition health bar: missing (ranges)", lambda r: f"{r['health_missing']:,} ({r['health_ranges']})"),
]


def _groups(r: dict[str, Any]) -> list[dict[str, Any]]:
    entries = r["materialization_entries"]
    return [entries[g] for g in ("empty windows", "windows with rows") if g in entries]


def table(results: list[dict[str, Any]]) -> list[str]:
    """One column per (first sync, recipients, instance)."""
    heads = [f"{r['first_sync']} {r['recipients']:,} {r['instance']}" for r in results]
    lines = ["| figure | " + " | ".join(heads) + " |", "|---|" + "---|" * len(results)]
    for label, cell in FIGURES:
        cells = []
        for r in results:
            try:
                cells.append(str(cell(r)))
            except (KeyError, TypeError):
                cells.append("–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", default="1000", help="recipients onboarded at once; a comma list runs each")
    parser.add_argument("--rows", type=int, default=20, help="rows per recipient")
    parser.add_argument("--instance", default=",".join(INSTANCES), help="sqlite, postgres (instances.py)")
    parser.add_argument("--first-sync", default="sensor", help="sensor (dagster-daemon) and/or cli (incsync transfer)")
    parser.add_argument("--repeat", type=int, default=3, help="times each asset-page query is asked")
    parser.add_argument("--sample", type=int, default=2000, help="materializations parsed for the sizes by entry")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--workdir", type=Path, default=None, help="one folder per run below it")
    parser.add_argument("--keep", action="store_true", help="keep the databases and the instances' folders")
    parser.add_argument("--json", type=Path, default=None, help="write every result here too")
    args = parser.parse_args()
    kinds = parse_instances(args.instance)
    syncs = parse_list(args.first_sync, FIRST_SYNCS, "--first-sync")
    counts = [int(n) for n in args.recipients.split(",") if n.strip()]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (databases, daemon) on kill too

    work = args.workdir or Path(f"/tmp/incsync-bench-day1-{uuid.uuid4().hex[:6]}")
    user = pg_user()
    instances = Instances(host=HOST, port=PORT, user=user)
    results = []
    try:
        for recipients in counts:
            for first_sync in syncs:
                for kind in kinds:
                    results.append(day_one(args, first_sync, kind, recipients, work / f"{first_sync}-{recipients}-{kind}",
                                           user, instances))
                    if args.json:
                        args.json.write_text(json.dumps(results, indent=2))
    finally:
        instances.close()
    print(f"\n{os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.rows} rows a "
          "recipient, PostgreSQL destinations")
    print("\n".join(table(results)))
    (work / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

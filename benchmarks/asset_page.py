"""The asset page at day one's scale: what each of its queries costs with one model's asset holding
``--recipients`` × 395 daily-window partitions (``day_one.py``'s shape), without moving any row.

The instance's state is built the way day one leaves it, through the code path a model's run stores its
windows by (``dagster_compat.materialization_reporter``: incsync's compact event rows, in batches of one
recipient's windows), from a real Dagster run: the recipients registered as the ``recipients`` dynamic
partitions, one materialization per (window, recipient) partition, each window with its own counts and
transfer id, the last window of each recipient's commit with the commit's record (docs/design.md#metadata).
``--missing`` leaves that many windows of each recipient unmaterialized, ``--failed`` marks that many of each
recipient's windows failed (planned by a failed run), so the answers' counts can be checked exactly.

Then, on the instance (``--instance sqlite`` or ``postgres``, as ``incsync dagster-yaml`` writes it):
- the storage calls behind the page, in-process, each timed (``--repeat`` times: first, cold, and the
  median): the asset's record with its cached partition status (``get_asset_records``), the materialized
  partitions (``get_materialized_partitions``), the planned-but-not-materialized partitions, and the
  partition status Dagster computes from them (``get_partition_subsets``, what partition stats and partition
  health both call);
- the asset page's GraphQL queries, from a ``dagster-webserver`` over the instance, as the installed UI sends
  them (``day_one.ui_queries``: definition, partition stats, partition health, latest materialization,
  recent events), each timed from the client, and what the partition stats and health bar say: materialized,
  failed and missing partitions, checked against what was built.

Not part of ``make test``:

    PYTHONPATH=. .venv/bin/python benchmarks/asset_page.py --recipients 1000 --instance sqlite --work /tmp/ap1000

``--work`` keeps the built instance for a later run (say, with another incsync on PYTHONPATH: the webserver runs
the incsync this process imports).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
WINDOWS = 395


# --- The instance's state ------------------------------------------------------------------------------------

def model_start(windows: int, now: datetime | None = None) -> datetime:
    """The model start that gives ``windows`` daily windows today, the open one included."""
    today = (now or datetime.now(UTC)).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=windows - 1)


def write_config(path: Path, *, recipients: int, start: datetime) -> None:
    """A configuration of one model over ``recipients`` recipients (``scale_daemon.write_config``'s shape)."""
    from scale_daemon import write_config as scale_config

    scale_config(path, source_db="unused", user="unused", recipients=recipients, destination="postgres", start=start,
                 frequency="0 * * * *")


def populate(instance: Any, config_path: Path, *, recipients: int, missing: int = 0, failed: int = 0,
             batch_recipients: int = 10, progress: Callable[[str], None] = print) -> dict[str, int]:
    """Register the recipients and store their windows' materializations through a real run of the model's
    asset whose IO manager reports them as a model's run does (``materialization_reporter``), one recipient's
    windows at a time; the last ``missing`` windows of each recipient are left out, and the ``failed`` windows
    before those are planned by a run that then fails. What was built: partitions, materialized, failed."""
    import dagster as dg
    from scale_daemon import tenant

    from incsync.config.load import load_config
    from incsync.operations.dagster_compat import DEFER_ASSET_EVENTS_TAG, materialization_reporter, report_planned
    from incsync.operations.partitions import (
        RECIPIENTS_PARTITIONS,
        model_asset_key,
        model_partitions,
        partition_key,
        window_partitions,
    )

    config = load_config(config_path)
    model = config.models[0]
    key = model_asset_key(model)
    partitions = model_partitions(model)
    windows = window_partitions(model).get_partition_keys()
    ids = [tenant(k) for k in range(recipients)]
    instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ids)
    done = len(windows) - missing - failed
    if done < 1:
        raise SystemExit(f"--missing {missing} and --failed {failed} leave no window of {len(windows)} to materialize")

    def metadata(recipient: str, i: int, transfer: str) -> dict[str, dg.MetadataValue]:
        md: dict[str, dg.MetadataValue] = {"rows_transferred": dg.MetadataValue.int(0),
                                           "delta_rows_transferred": dg.MetadataValue.int(0),
                                           "transfer_id": dg.MetadataValue.text(transfer)}
        if i == done - 1:  # the commit's record, on its last window (docs/design.md#metadata)
            md.update({"rows_transferred": dg.MetadataValue.int(20), "delta_rows_transferred": dg.MetadataValue.int(20),
                       "dagster/row_count": dg.MetadataValue.int(20),
                       "high_watermark": dg.MetadataValue.timestamp(time.time()),
                       "transfer_type": dg.MetadataValue.text("FULL_REFRESH"),
                       "destination": dg.MetadataValue.text(f"d_{recipient}"),
                       "recipient": dg.MetadataValue.text(recipient),
                       "transfer_windows": dg.MetadataValue.int(done)})
        return md

    class Reporting(dg.ConfigurableIOManager):
        def handle_output(self, context: dg.OutputContext, obj: int) -> None:
            report = materialization_reporter(context)
            began = time.monotonic()
            for at in range(0, recipients, batch_recipients):
                batch = []
                for recipient in ids[at: at + batch_recipients]:
                    transfer = f"t-{recipient}-0001"
                    batch += [dg.AssetMaterialization(asset_key=key, partition=str(partition_key(w, recipient)),
                                                      metadata=metadata(recipient, i, transfer))
                              for i, w in enumerate(windows[:done])]
                report(batch)
                if (at // batch_recipients) % 100 == 99:
                    progress(f"    {at + batch_recipients:,} recipients stored ({time.monotonic() - began:.0f} s)")

        def load_input(self, context: dg.InputContext) -> None:
            return None

    class Failing(dg.ConfigurableIOManager):
        def handle_output(self, context: dg.OutputContext, obj: int) -> None:
            keys = [str(partition_key(w, r)) for r in ids for w in windows[done: done + failed]]
            for at in range(0, len(keys), 10_000):
                report_planned(context.step_context, key, keys[at: at + 10_000])
            raise RuntimeError("the windows this run planned failed")

        def load_input(self, context: dg.InputContext) -> None:
            return None

    @dg.asset(key=key, partitions_def=partitions, io_manager_key="reporting")
    def asset() -> int:
        return 1

    first = str(partition_key(windows[0], ids[0]))
    tags = {DEFER_ASSET_EVENTS_TAG: "true"}
    dg.materialize([asset], instance=instance, partition_key=first, resources={"reporting": Reporting()}, tags=tags)
    if failed:
        dg.materialize([asset], instance=instance, partition_key=first, resources={"reporting": Failing()}, tags=tags,
                       raise_on_error=False)
    return {"partitions": recipients * len(windows), "materialized": recipients * done, "failed": recipients * failed,
            "missing": recipients * missing, "windows": len(windows)}


# --- The storage calls behind the page ----------------------------------------------------------------------

def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, list[float]]:
    times, value = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - began)
    return value, times


def storage_calls(instance: Any, config_path: Path, repeat: int) -> dict[str, Any]:
    """Each storage call the asset page's partition queries make, timed in this process."""
    import asyncio

    from dagster._core.instance.types import CachingDynamicPartitionsLoader
    from dagster._core.loader import LoadingContextForTest
    from dagster._core.storage.partition_status_cache import get_partition_subsets

    from incsync.config.load import load_config
    from incsync.operations.partitions import model_asset_key, model_partitions

    model = load_config(config_path).models[0]
    key, partitions = model_asset_key(model), model_partitions(model)
    storage = instance.event_log_storage
    out: dict[str, Any] = {}

    def subsets() -> tuple[int, int, int]:
        loader = CachingDynamicPartitionsLoader(instance)
        context = LoadingContextForTest(instance)
        m, f, p = asyncio.run(get_partition_subsets(instance, context, key, loader, partitions))
        return len(m), len(f), len(p)

    calls: dict[str, Callable[[], Any]] = {
        "partition status (get_partition_subsets)": subsets,
        "asset record with Dagster's cached status (get_asset_records)": lambda: _cached_bytes(instance, key),
        "materialized partitions (get_materialized_partitions)": lambda: len(instance.get_materialized_partitions(key)),
        "planned, not materialized (…attempts_without_materializations)": lambda: len(
            storage.get_latest_asset_partition_materialization_attempts_without_materializations(key)),
        "partitions (get_num_partitions)": lambda: _num_partitions(instance, partitions),
    }
    for label, fn in calls.items():
        value, times = timed(fn, repeat)
        out[label] = {"first_s": round(times[0], 3), "median_s": round(statistics.median(times), 3), "answer": value}
        print(f"  {label}: first {times[0]:.3f} s, median of {repeat} {statistics.median(times):.3f} s -> {value}", flush=True)
    return out


def _cached_bytes(instance: Any, key: Any) -> int:
    cached = instance.get_asset_records([key])[0].asset_entry.cached_status
    return len(cached.serialized_materialized_partition_subset or "") if cached is not None else 0


def _num_partitions(instance: Any, partitions: Any) -> int:
    from dagster._core.definitions.partitions.context import partition_loading_context

    with partition_loading_context(dynamic_partitions_store=instance):
        return partitions.get_num_partitions()


# --- The page's GraphQL queries ---------------------------------------------------------------------------

def graphql(env: dict[str, str], work: Path, repeat: int) -> dict[str, Any]:
    """``day_one.asset_page``: the UI's queries from a fresh webserver, timed, and what they say."""
    from day_one import asset_page

    return asset_page(env, work, repeat)


def check(built: dict[str, int], page: dict[str, Any]) -> list[str]:
    """Where the page's answer differs from what was built (nothing: it tells the truth)."""
    want = {"ui_partitions": built["partitions"], "ui_materialized": built["materialized"], "ui_failed": built["failed"],
            "ui_missing": built["missing"], "health_materialized": built["materialized"],
            "health_failed": built["failed"], "health_missing": built["missing"]}
    return [f"{k}: {page.get(k)} != {v}" for k, v in want.items() if page.get(k) != v]


# --- Main -----------------------------------------------------------------------------------------------------

@contextmanager
def open_instance(kind: str, home: Path, config_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """The instance ``incsync dagster-yaml`` writes for ``kind`` (``instances.py``), created on first use; a
    PostgreSQL one's database (``incsync_bench_asset_page_<pid>``) is named in ``home/database`` and kept, so
    a later run reuses it; ``--drop`` drops it."""
    import dagster as dg
    from instances import URL_ENV, Instances
    from jdbc_postgres import HOST, PORT, pg_user

    env: dict[str, str] = {}
    if not (home / "dagster.yaml").exists():
        instances = Instances(host=HOST, port=PORT, user=pg_user(), prefix=f"incsync_bench_asset_page_{os.getpid()}")
        if kind == "postgres":  # deploy/dagster.yaml's storage over a database of its own, incsync's event log
            import yaml
            from psycopg import connect

            from incsync.config.load import load_config
            from incsync.operations.concurrency import dagster_yaml

            db = instances.next_name()
            with connect(host=HOST, port=PORT, user=instances.user, dbname="postgres", autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{db}"')
            env = {URL_ENV: instances.url(db)}
            base = yaml.safe_load((ROOT / "dagster.yaml").read_text()) or {}
            base["storage"] = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["storage"]
            home.mkdir(parents=True, exist_ok=True)
            (home / "base.yaml").write_text(yaml.safe_dump(base))
            os.environ.update(env)
            (home / "dagster.yaml").write_text(dagster_yaml(load_config(config_path), home / "base.yaml", dagster_home=home))
            (home / "database").write_text(env[URL_ENV])
        else:
            env = instances.write(kind, config=config_path, home=home, base=ROOT / "dagster.yaml")
    elif (home / "database").exists():
        env = {URL_ENV: (home / "database").read_text()}
    os.environ.update(env)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance, env


def drop_database(home: Path) -> None:
    import psycopg
    from jdbc_postgres import HOST, PORT, pg_user

    if (home / "database").exists():
        db = (home / "database").read_text().rsplit("/", 1)[1]
        with psycopg.connect(host=HOST, port=PORT, user=pg_user(), dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        print(f"  dropped {db}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--windows", type=int, default=WINDOWS)
    parser.add_argument("--missing", type=int, default=0, help="windows of each recipient left unmaterialized")
    parser.add_argument("--failed", type=int, default=0, help="windows of each recipient a failed run planned")
    parser.add_argument("--repeat", type=int, default=3, help="times each query is asked")
    parser.add_argument("--work", type=Path, default=None, help="the instance's folder; kept, and reused when built")
    parser.add_argument("--skip", default="", help="comma-separated: storage, graphql")
    parser.add_argument("--instance", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--drop", action="store_true", help="drop a PostgreSQL instance's database at the end")
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    work = args.work or Path(tempfile.mkdtemp(prefix="incsync-asset-page-"))
    work.mkdir(parents=True, exist_ok=True)
    config_path, built_path = work / "incsync.yaml", work / "built.json"
    if not built_path.exists():
        write_config(config_path, recipients=args.recipients, start=model_start(args.windows))
    env = {"BENCH_DEST_DSN": "postgresql://unused@127.0.0.1/unused", "DAGSTER_HOME": str(work / "home"),
           "INCSYNC_CONFIG": str(config_path)}
    os.environ.update(env)
    result: dict[str, Any] = {"recipients": args.recipients, "instance": args.instance, "load_before": os.getloadavg()[0]}
    with open_instance(args.instance, work / "home", config_path) as (instance, instance_env):
        env.update(instance_env)
        if built_path.exists():
            built = json.loads(built_path.read_text())
            print(f"  reusing {work}: {built}", flush=True)
        else:
            began = time.monotonic()
            built = populate(instance, config_path, recipients=args.recipients, missing=args.missing, failed=args.failed)
            built["seconds"] = round(time.monotonic() - began, 1)
            built_path.write_text(json.dumps(built))
            print(f"  built {built}", flush=True)
        result["built"] = built
        if "storage" not in skip:
            result["storage"] = storage_calls(instance, config_path, args.repeat)
    if "graphql" not in skip:
        import incsync  # the webserver runs the incsync this process imports (PYTHONPATH), old or new

        page = graphql({**os.environ, **env, "PYTHONPATH": str(Path(incsync.__file__).resolve().parent.parent)}, work, args.repeat)
        result["graphql"] = page
        wrong = check(built, page)
        print("  the page tells the truth" if not wrong else "  THE PAGE IS WRONG: " + "; ".join(wrong), flush=True)
    if args.drop:
        drop_database(work / "home")
    result["load_after"] = os.getloadavg()[0]
    (work / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

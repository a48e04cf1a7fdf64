"""Commands that set up and look after where incsync runs: `maintain` (compaction and vacuum), `audit` (the
transfer log in the provider's warehouse), `janitor`
(object-storage files no manifest lists), `dagster-yaml` (run concurrency limits), `spark-server` (a warm
Spark Connect server) and `demo`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from incsync.errors import ConfigError
from incsync.paths import config_path


def cmd_janitor(args: argparse.Namespace) -> int:
    from incsync.config.load import load_config
    from incsync.destinations.object_storage.janitor import janitor, janitored

    file = config_path(args.config)
    config = load_config(file)
    targets = janitored(config.destinations)
    if args.destination:
        targets = [d for d in targets if d.name == args.destination]
        if not targets:
            known = ", ".join(d.name for d in janitored(config.destinations))
            raise ConfigError(str(file), [f'--destination: "{args.destination}" is not an object_storage destination; known: [{known}]'])
    verb = "would remove" if args.dry_run else "removed"
    for destination in targets:
        removed = janitor(destination.path, grace_seconds=args.grace_seconds, dry_run=args.dry_run,
                          storage_options=destination.storage_options)
        for path in removed:
            print(f"{verb} {path}")
        print(f"{destination.name}: {verb} {len(removed)} unmanifested file(s) older than {args.grace_seconds:g} s")
    return 0


def cmd_dagster_yaml(args: argparse.Namespace) -> int:
    from incsync.config.load import load_config
    from incsync.operations.concurrency import dagster_yaml

    home = Path(args.output).parent if args.output else (Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else None)
    text = dagster_yaml(load_config(args.config), Path(args.base) if args.base else None, dagster_home=home)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0


def cmd_expand_events(args: argparse.Namespace) -> int:
    """Rewrite the instance's compact materialization rows as JSON (docs/operations.md)."""
    from incsync.operations.dagster_compat.compact import expand_stored_events
    from incsync.operations.instance import dagster_instance
    from incsync.paths import config_path

    instance = dagster_instance(config_path(args.config))
    done = expand_stored_events(instance.event_log_storage, progress=lambda n: print(f"  {n} rows rewritten", flush=True))
    print(f"{done} compact event rows rewritten as JSON: the instance's dagster.yaml may now name Dagster's own event log")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from incsync.cli.demo import run_demo

    return run_demo(Path(args.workdir), rows=args.rows, acme=args.acme_destination, mariadb=args.mariadb)


def demo_acme_kinds() -> list[str]:
    """The kinds `incsync demo --acme-destination` offers: the demo's own, read when the option is used."""
    from incsync.cli.demo import ACME_DESTINATIONS

    return list(ACME_DESTINATIONS)


def cmd_spark_server(args: argparse.Namespace) -> int:
    import signal

    from incsync.spark.server import remote_url, start_server, stop_server

    print(f"starting a Spark Connect server ({args.master}) on 127.0.0.1:{args.port} ...", flush=True)
    driver = {"spark.driver.host": args.driver_host, "spark.driver.bindAddress": args.bind_address}
    process = start_server(port=args.port, master=args.master, log_file=Path(args.log) if args.log else None,
                           extra_conf={k: v for k, v in driver.items() if v})
    print(f"ready: add to incsync.yaml\n  spark:\n    spark.remote: \"{remote_url(args.port)}\"\nCtrl-C stops it.", flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process)
    return 0


def cmd_maintain(args: argparse.Namespace) -> int:
    """Compact and vacuum the destinations now (what the `incsync_maintenance` schedule runs)."""
    from incsync.config.load import load_config
    from incsync.destinations.maintenance import size_text
    from incsync.operations.instance import dagster_instance
    from incsync.operations.maintenance import maintain_destinations, summary

    file = config_path(args.config)
    config = load_config(file)
    done = []
    for result in maintain_destinations(config, instance=dagster_instance(file), dry_run=args.dry_run,
                                        destination=args.destination, model=args.model):
        print(result.line(), flush=True)
        done.append(result)
    totals = summary(done)
    freed = totals["bytes_stored_before"] - totals["bytes_stored_after"]
    # Compaction writes new files while the old ones stay for readers until the retention passes: a pass
    # that compacts and vacuums nothing stores more than before, said so rather than as a negative "freed".
    change = (f"freed {size_text(freed)}" if freed >= 0 else
              f"stored {size_text(-freed)} more until the retention passes (the compacted files' old copies "
              "stay for readers of older versions)")
    print(f"{totals['tables']} table(s) maintained ({totals['tables_skipped']} skipped): "
          f"{totals['files_compacted']} file(s) compacted, {totals['files_vacuumed']} vacuumed, "
          f"{change}" if not args.dry_run else
          f"{totals['tables']} table(s) looked at (dry run): {totals['files_compacted']} file(s) to compact, "
          f"{totals['files_vacuumed']} file(s) to vacuum")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Append the transfer log once (what the `incsync_audit_schedule` runs), through Dagster: the pass is a
    materialization of the `incsync_audit` asset like the schedule's."""
    from incsync.config.load import load_config
    from incsync.operations.audit import lines
    from incsync.operations.instance import dagster_instance
    from incsync.orchestration.definitions import build_definitions
    from incsync.orchestration.housekeeping import AUDIT_JOB, AUDIT_OP

    file = config_path(args.config)
    if load_config(file).audit is None:
        raise ConfigError(str(file), ["audit: the file has no `audit:` section; add `audit: {destination: <name>}` "
                                      "naming a destination of the provider's that no recipient uses (docs/operations.md)"])
    result = build_definitions(file).resolve_job_def(AUDIT_JOB).execute_in_process(
        instance=dagster_instance(file), raise_on_error=False)
    if not result.success:
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        error = failure.step_failure_data.error if failure and failure.step_failure_data else None
        print(f"incsync audit failed: {error.message.strip() if error else 'see the run ' + result.run_id}")
        return 1
    [mat] = result.asset_materializations_for_node(AUDIT_OP)
    for line in lines({k: v.value for k, v in mat.metadata.items()}):
        print(line)
    return 0
